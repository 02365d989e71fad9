//! Reading a checkpoint as `--restore` takes it: one process's safetensors file, or a
//! cluster's index with its shards (the parts of a partitioned variable joined).

use anyhow::anyhow;
use graphc_runtime::checkpoint::{self, Loaded};
use std::path::Path;

/// The checkpoint at `path`; errors name it and the flag.
pub fn read_checkpoint(path: &Path) -> anyhow::Result<Loaded> {
    if let Some(merged) = graphc_dist::checkpoint::load_merged(path).map_err(|e| anyhow!("--restore: {e}"))? {
        return Ok(merged);
    }
    checkpoint::load(path).map_err(|e| anyhow!("--restore: {e}"))
}
