//! A cluster's checkpoint: one shard per ps task (the runtime's safetensors checkpoint of the
//! task's variables, `PATH.psI.stepN`) and an index at `PATH` naming the shards of one step.
//! The chief asks every ps task for its shard and writes the index only when all landed,
//! atomically, so a checkpoint lands whole or not at all: a reader follows the index, which
//! names complete files of one step. A ps task keeps its two newest shards (the index names
//! one of them, or the step before while the chief gathers a new one).

use graphc_runtime::checkpoint;
use graphc_runtime::fsutil::{read_regular, write_atomically};
use graphc_runtime::Session;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The index's `format`.
pub const FORMAT: &str = "graphc-sharded-checkpoint";

/// The index: the step, and each ps task's shard (a file name beside the index).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: String,
    pub step: u64,
    pub shards: Vec<String>,
}

/// Where ps task `task` writes its shard of step `step` for the index at `index`.
pub fn shard_path(index: &Path, task: usize, step: u64) -> PathBuf {
    let mut name = index.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".ps{task}.step{step}"));
    index.with_file_name(name)
}

/// Writes ps task `task`'s shard of step `step` (its session's variables), atomically, and
/// removes its shards older than the one before. Returns the shard's path.
pub fn write_shard(
    session: &Session,
    index: &Path,
    task: usize,
    step: u64,
    previous: Option<u64>,
) -> Result<PathBuf, String> {
    let bytes = checkpoint::encode(&session.snapshot(), Some(step)).map_err(|e| e.message)?;
    let path = shard_path(index, task, step);
    write_atomically(&path, |f| std::io::Write::write_all(f, &bytes))
        .map_err(|e| format!("cannot write checkpoint shard {}: {e}", path.display()))?;
    // Shards older than the previous one are named by no index the chief can still write;
    // the one the index on disk names is kept whatever its step (a save that failed on
    // another task left the index where it was).
    let indexed = read_index(index).ok().flatten().and_then(|i| i.shards.get(task).cloned());
    if let Ok(dir) = std::fs::read_dir(path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))) {
        let stem = format!("{}.ps{task}.step", index.file_name().unwrap_or_default().to_string_lossy());
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(n) = name.strip_prefix(&stem).and_then(|n| n.parse::<u64>().ok()) else { continue };
            if n != step && Some(n) != previous && indexed.as_deref() != Some(name.as_str()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(path)
}

/// Writes the index of step `step` over `shards` (one per ps task, in task order), atomically.
pub fn write_index(index: &Path, step: u64, shards: &[PathBuf]) -> Result<(), String> {
    let names = shards
        .iter()
        .map(|s| {
            s.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| format!("a shard without a file name: {}", s.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let json = serde_json::to_vec_pretty(&Index { format: FORMAT.to_string(), step, shards: names })
        .map_err(|e| e.to_string())?;
    write_atomically(index, |f| std::io::Write::write_all(f, &json))
        .map_err(|e| format!("cannot write checkpoint index {}: {e}", index.display()))
}

/// The index at `path`, or None when there is no file there.
pub fn read_index(path: &Path) -> Result<Option<Index>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = read_regular(path, "a checkpoint index")?;
    let index: Index = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a checkpoint index (graphc's sharded checkpoint JSON): {e}", path.display()))?;
    if index.format != FORMAT {
        return Err(format!("{}: expected format \"{FORMAT}\", got \"{}\"", path.display(), index.format));
    }
    Ok(Some(index))
}

/// Restores ps task `task` of `tasks` from the checkpoint indexed at `path`, if there is one;
/// returns its step.
pub fn restore_shard(session: &Session, path: &Path, task: usize, tasks: usize) -> Result<Option<u64>, String> {
    let Some(index) = read_index(path)? else { return Ok(None) };
    if index.shards.len() != tasks {
        return Err(format!(
            "{}: the checkpoint has {} shards; this cluster has {tasks} ps tasks",
            path.display(),
            index.shards.len()
        ));
    }
    let name = &index.shards[task];
    if name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return Err(format!("{}: shard '{name}' is not a file name beside the index", path.display()));
    }
    let shard = path.with_file_name(name);
    let bytes = read_regular(&shard, "a checkpoint shard")?;
    let loaded = checkpoint::decode(&bytes).map_err(|e| format!("{}: {}", shard.display(), e.message))?;
    checkpoint::restore(session.state(), &loaded).map_err(|e| format!("{}: {}", shard.display(), e.message))?;
    Ok(Some(index.step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_names_its_shards_and_bad_ones_are_refused() {
        let dir = std::env::temp_dir().join(format!("graphc-shards-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let index = dir.join("ckpt");
        assert_eq!(shard_path(&index, 1, 20), dir.join("ckpt.ps1.step20"));
        assert_eq!(read_index(&index), Ok(None));
        write_index(&index, 20, &[shard_path(&index, 0, 20), shard_path(&index, 1, 20)]).unwrap();
        let read = read_index(&index).unwrap().unwrap();
        assert_eq!((read.step, read.shards), (20, vec!["ckpt.ps0.step20".to_string(), "ckpt.ps1.step20".to_string()]));
        std::fs::write(&index, "{}").unwrap();
        assert!(read_index(&index).unwrap_err().contains("is not a checkpoint index"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
