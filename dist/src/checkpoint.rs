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
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The index's `format`.
pub const FORMAT: &str = "graphc-sharded-checkpoint";

/// The index: the step, each ps task's shard (a file name beside the index), and how the
/// partitioned variables were cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: String,
    pub step: u64,
    pub shards: Vec<String>,
    #[serde(flatten)]
    pub parts: Parts,
}

/// The variables held in parts (`NAME/part_K`, K from 0): those cut in rows, and the scalars
/// copied to every part of their group, by name, with their number of parts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rows: BTreeMap<String, usize>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub copies: BTreeMap<String, usize>,
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
pub fn write_index(index: &Path, step: u64, shards: &[PathBuf], parts: &Parts) -> Result<(), String> {
    let names = shards
        .iter()
        .map(|s| {
            s.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| format!("a shard without a file name: {}", s.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let json =
        serde_json::to_vec_pretty(&Index { format: FORMAT.to_string(), step, shards: names, parts: parts.clone() })
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

/// Shard `name` of the index at `path`: a file beside it.
fn shard_beside(path: &Path, name: &str) -> Result<PathBuf, String> {
    if name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return Err(format!("{}: shard '{name}' is not a file name beside the index", path.display()));
    }
    Ok(path.with_file_name(name))
}

fn decode_shard(shard: &Path) -> Result<checkpoint::Loaded, String> {
    let bytes = read_regular(shard, "a checkpoint shard")?;
    checkpoint::decode(&bytes).map_err(|e| format!("{}: {}", shard.display(), e.message))
}

/// The cluster's checkpoint at `path` as one process would have saved it: every shard's
/// variables, the parts of a partitioned one joined (its rows in order; a scalar's copies,
/// checked equal, as one). None when `path` is not a cluster's index (a plain checkpoint).
pub fn load_merged(path: &Path) -> Result<Option<checkpoint::Loaded>, String> {
    // An index is a small JSON file; anything else is left to the plain checkpoint's reader.
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() <= 1 << 20 => {}
        _ => return Ok(None),
    }
    let Ok(bytes) = std::fs::read(path) else { return Ok(None) };
    let Ok(index) = serde_json::from_slice::<Index>(&bytes) else { return Ok(None) };
    if index.format != FORMAT {
        return Err(format!("{}: expected format \"{FORMAT}\", got \"{}\"", path.display(), index.format));
    }
    let mut all = checkpoint::Loaded {
        values: BTreeMap::new(),
        uninitialized: Vec::new(),
        step: Some(index.step),
        train: BTreeMap::new(),
    };
    for name in &index.shards {
        let shard = decode_shard(&shard_beside(path, name)?)?;
        all.values.extend(shard.values);
        all.uninitialized.extend(shard.uninitialized);
    }
    let bad = |name: &str, why: String| format!("{}: variable '{name}': {why}", path.display());
    for (joined, (name, &n)) in
        index.parts.rows.iter().map(|p| (true, p)).chain(index.parts.copies.iter().map(|p| (false, p)))
    {
        let parts = (0..n)
            .map(|k| {
                let part = format!("{name}/part_{k}");
                all.values.remove(&part).ok_or_else(|| bad(name, format!("no shard holds its part {part}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = parts.first() else { return Err(bad(name, "it has no parts".into())) };
        let whole = if joined {
            let mut shape = first.shape().to_vec();
            let mut bytes = Vec::new();
            shape[0] = 0;
            for p in &parts {
                if p.dtype() != first.dtype() || p.shape().get(1..) != first.shape().get(1..) {
                    return Err(bad(name, "its parts' rows differ in type".into()));
                }
                shape[0] += p.shape()[0];
                bytes.extend(p.to_le_bytes());
            }
            graphc_runtime::Tensor::from_le_bytes(first.dtype(), &shape, &bytes)
                .ok_or_else(|| bad(name, "its parts do not join".into()))?
        } else {
            if parts.iter().any(|p| p.to_le_bytes() != first.to_le_bytes()) {
                return Err(bad(name, "its copies differ".into()));
            }
            first.clone()
        };
        all.values.insert(name.clone(), whole);
    }
    Ok(Some(all))
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
    let shard = shard_beside(path, &index.shards[task])?;
    let loaded = decode_shard(&shard)?;
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
        write_index(&index, 20, &[shard_path(&index, 0, 20), shard_path(&index, 1, 20)], &Parts::default()).unwrap();
        let read = read_index(&index).unwrap().unwrap();
        assert_eq!((read.step, read.shards), (20, vec!["ckpt.ps0.step20".to_string(), "ckpt.ps1.step20".to_string()]));
        std::fs::write(&index, "{}").unwrap();
        assert!(read_index(&index).unwrap_err().contains("is not a checkpoint index"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_merged_checkpoint_joins_the_parts() {
        use graphc_ir::{DType, TensorType};
        use graphc_runtime::Tensor;
        let dir = std::env::temp_dir().join(format!("graphc-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let index = dir.join("ckpt");
        let t = |v: Vec<f32>, shape: &[u64]| {
            Some(std::sync::Arc::new(Tensor::from_f32(v, &TensorType::new(DType::F32, shape.to_vec())).unwrap()))
        };
        let shards = [
            vec![
                ("w/part_0".to_string(), t(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])),
                ("s/part_0".into(), t(vec![5.0], &[])),
            ],
            vec![
                ("w/part_1".to_string(), t(vec![6.0, 7.0], &[1, 2])),
                ("s/part_1".into(), t(vec![5.0], &[])),
                ("b".into(), t(vec![8.0], &[1])),
            ],
        ];
        let paths: Vec<PathBuf> = shards
            .iter()
            .enumerate()
            .map(|(i, snap)| {
                let p = shard_path(&index, i, 3);
                std::fs::write(&p, checkpoint::encode(snap, Some(3)).unwrap()).unwrap();
                p
            })
            .collect();
        let mut parts = Parts::default();
        parts.rows.insert("w".into(), 2);
        parts.copies.insert("s".into(), 2);
        write_index(&index, 3, &paths, &parts).unwrap();
        let merged = load_merged(&index).unwrap().unwrap();
        assert_eq!(merged.step, Some(3));
        assert_eq!(merged.values.keys().collect::<Vec<_>>(), ["b", "s", "w"]);
        assert_eq!(merged.values["w"].shape(), [3, 2]);
        assert_eq!(
            merged.values["w"].to_le_bytes(),
            t(vec![1.0, 2.0, 3.0, 4.0, 6.0, 7.0], &[3, 2]).unwrap().to_le_bytes()
        );
        // A part missing, or a plain checkpoint (not an index).
        parts.rows.insert("w".into(), 3);
        write_index(&index, 3, &paths, &parts).unwrap();
        assert!(load_merged(&index).unwrap_err().contains("no shard holds its part w/part_2"));
        assert!(load_merged(&paths[0]).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
