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

/// The index: the step, each ps task's shard (a file name beside the index), per shard the
/// steps each worker's updates in it reach, and how the partitioned variables were cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: String,
    pub step: u64,
    pub shards: Vec<String>,
    /// Per shard, per worker: its last step whose update the shard holds (applied, or dropped
    /// as a straggler's). Empty in an index of an older graphc: then the index's step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settled: Vec<Vec<u64>>,
    #[serde(flatten)]
    pub parts: Parts,
}

/// A ps task's shard as written: its file, and per worker the last step whose update it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub path: PathBuf,
    pub settled: Vec<u64>,
}

/// What a ps task restored: the index's step, and per worker the last step whose update its
/// shard holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    pub step: u64,
    pub settled: Vec<u64>,
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
    if let Ok(dir) = std::fs::read_dir(graphc_runtime::fsutil::parent_dir(&path)) {
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
pub fn write_index(index: &Path, step: u64, shards: &[Shard], parts: &Parts) -> Result<(), String> {
    let names = shards
        .iter()
        .map(|s| {
            s.path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| format!("a shard without a file name: {}", s.path.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let settled = shards.iter().map(|s| s.settled.clone()).collect();
    let index_of = Index { format: FORMAT.to_string(), step, shards: names, settled, parts: parts.clone() };
    let json = serde_json::to_vec_pretty(&index_of).map_err(|e| e.to_string())?;
    write_atomically(index, |f| std::io::Write::write_all(f, &json))
        .map_err(|e| format!("cannot write checkpoint index {}: {e}", index.display()))
}

/// The index at `path`, or None when there is no file there.
pub fn read_index(path: &Path) -> Result<Option<Index>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = read_regular(path, "a checkpoint index")?;
    parse_index(path, &bytes).map(Some)
}

/// A JSON value as an error shows it: as JSON, its first 40 characters.
fn shown(v: &serde_json::Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        None => text,
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], text.len()),
    }
}

/// The index in `bytes` (the file at `path`), every field checked: the error names the file,
/// the field, what was expected and what came.
fn parse_index(path: &Path, bytes: &[u8]) -> Result<Index, String> {
    use serde_json::Value;
    let at = path.display();
    let not_one = |why: String| format!("{at} is not a checkpoint index (graphc's sharded checkpoint JSON): {why}");
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_eof() {
            format!("{at} is a truncated checkpoint index: its JSON stops after {} bytes ({e})", bytes.len())
        } else {
            not_one(e.to_string())
        }
    })?;
    let Value::Object(fields) = &value else { return Err(not_one(format!("it is {}, not an object", shown(&value)))) };
    let Some(format) = fields.get("format") else { return Err(not_one("it has no \"format\"".into())) };
    if format.as_str() != Some(FORMAT) {
        return Err(not_one(format!("its format is {}; expected \"{FORMAT}\"", shown(format))));
    }
    let bad = |field: &str, got: &Value, expected: &str| {
        format!("{at}: the checkpoint index's {field} is {}; expected {expected}", shown(got))
    };
    let need = |field: &str, expected: &str| -> Result<&Value, String> {
        fields.get(field).ok_or_else(|| format!("{at}: the checkpoint index has no \"{field}\"; expected {expected}"))
    };
    if let Some(other) =
        fields.keys().find(|k| !["format", "step", "shards", "settled", "rows", "copies"].contains(&k.as_str()))
    {
        return Err(format!("{at}: the checkpoint index has a field \"{other}\", which graphc does not know"));
    }
    let steps = format!("the steps done, a whole number from 0 to {}", u64::MAX);
    let step = need("step", &steps)?;
    let step = step.as_u64().ok_or_else(|| bad("step", step, &steps))?;
    let names = "the shards' file names, a list of one string per ps task";
    let list = need("shards", names)?;
    let shards = match list.as_array() {
        Some(items) if !items.is_empty() => items
            .iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(|| bad("shards", list, names)))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(bad("shards", list, names)),
    };
    let per_worker = "per shard, a list of each worker's last step the shard holds";
    let settled = match fields.get("settled") {
        None => Vec::new(),
        Some(v) => {
            let lists =
                v.as_array().filter(|l| l.len() == shards.len()).ok_or_else(|| bad("settled", v, per_worker))?;
            lists
                .iter()
                .map(|l| {
                    let steps = l.as_array().ok_or_else(|| bad("settled", v, per_worker))?;
                    steps.iter().map(|s| s.as_u64().ok_or_else(|| bad("settled", v, per_worker))).collect()
                })
                .collect::<Result<Vec<Vec<u64>>, String>>()?
        }
    };
    let mut parts = Parts::default();
    for (field, map) in [("rows", &mut parts.rows), ("copies", &mut parts.copies)] {
        let Some(v) = fields.get(field) else { continue };
        let counts = "the variables held in parts, each with its number of parts";
        let entries = v.as_object().ok_or_else(|| bad(field, v, counts))?;
        for (name, n) in entries {
            let count = n.as_u64().filter(|&n| n >= 1).and_then(|n| usize::try_from(n).ok());
            let count = count.ok_or_else(|| bad(&format!("{field}.{name}"), n, "a number of parts, at least 1"))?;
            map.insert(name.clone(), count);
        }
    }
    Ok(Index { format: FORMAT.to_string(), step, shards, settled, parts })
}

/// Whether a file beginning with `head` is meant as an index (JSON: an object) rather than a
/// safetensors checkpoint, whose first 8 bytes are its header's length, little-endian, so
/// hold a zero byte in any file under 2^56 bytes.
fn looks_like_index(head: &[u8]) -> bool {
    head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') && !head[..head.len().min(8)].contains(&0)
}

/// Shard `name` of the index at `path`: a file beside it.
fn shard_beside(path: &Path, name: &str) -> Result<PathBuf, String> {
    if name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return Err(format!("{}: shard '{name}' is not a file name beside the index", path.display()));
    }
    Ok(path.with_file_name(name))
}

/// Ps task `task`'s shard of the index `index` at `path`, read and checked: a checkpoint of
/// the index's step.
fn read_shard(path: &Path, index: &Index, task: usize) -> Result<(PathBuf, checkpoint::Loaded), String> {
    let shard = shard_beside(path, &index.shards[task])?;
    let bytes = read_regular(&shard, "a checkpoint shard")?;
    let loaded = checkpoint::decode(&bytes)
        .map_err(|e| format!("{} is not a valid checkpoint shard: {}", shard.display(), e.message))?;
    let (at, of) = (shard.display(), path.display());
    match loaded.step {
        Some(step) if step == index.step => Ok((shard, loaded)),
        Some(step) => Err(format!(
            "{at}: the shard is of step {step}, but its index {of} is of step {} (the shard is another checkpoint's)",
            index.step
        )),
        None => Err(format!(
            "{at}: the shard says no step (its metadata has no {}), but its index {of} is of step {}",
            checkpoint::meta::STEP,
            index.step
        )),
    }
}

/// The cluster's checkpoint at `path` as one process would have saved it: every shard's
/// variables, the parts of a partitioned one joined (its rows in order; a scalar's copies,
/// checked equal, as one). None when `path` is not a cluster's index (a plain checkpoint).
pub fn load_merged(path: &Path) -> Result<Option<checkpoint::Loaded>, String> {
    // An index is JSON; anything else is left to the plain checkpoint's reader (which names
    // what is wrong with a file that is neither).
    let mut head = Vec::with_capacity(16);
    // Opened only when a regular file: opening a FIFO would wait for a writer.
    match graphc_runtime::fsutil::open_regular(path, "a checkpoint") {
        Ok((f, _)) => {
            let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 16), &mut head);
        }
        Err(_) => return Ok(None),
    }
    if !looks_like_index(&head) {
        return Ok(None);
    }
    let Some(index) = read_index(path)? else { return Ok(None) };
    let mut all = checkpoint::Loaded {
        values: BTreeMap::new(),
        uninitialized: Vec::new(),
        step: Some(index.step),
        train: BTreeMap::new(),
    };
    for task in 0..index.shards.len() {
        let (_, shard) = read_shard(path, &index, task)?;
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

/// Restores ps task `task` of `tasks` (serving `workers` workers) from the checkpoint indexed
/// at `path`, if there is one.
pub fn restore_shard(
    session: &Session,
    path: &Path,
    task: usize,
    tasks: usize,
    workers: usize,
) -> Result<Option<Restored>, String> {
    let Some(index) = read_index(path)? else { return Ok(None) };
    if index.shards.len() != tasks {
        return Err(format!(
            "{}: the checkpoint has {} shards; this cluster has {tasks} ps tasks",
            path.display(),
            index.shards.len()
        ));
    }
    let (shard, loaded) = read_shard(path, &index, task)?;
    checkpoint::restore(session.state(), &loaded).map_err(|e| format!("{}: {}", shard.display(), e.message))?;
    // An index without them (or of a cluster with other workers): every worker's updates up
    // to the index's step.
    let settled = match index.settled.get(task) {
        Some(steps) if steps.len() == workers => steps.clone(),
        _ => vec![index.step; workers],
    };
    Ok(Some(Restored { step: index.step, settled }))
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
        let written = [shard_path(&index, 0, 20), shard_path(&index, 1, 20)];
        write_index(&index, 20, &shards(&written), &Parts::default()).unwrap();
        let read = read_index(&index).unwrap().unwrap();
        assert_eq!((read.step, read.shards), (20, vec!["ckpt.ps0.step20".to_string(), "ckpt.ps1.step20".to_string()]));
        assert_eq!(read.settled, [[3, 1], [3, 1]]);
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
        write_index(&index, 3, &self::shards(&paths), &parts).unwrap();
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
        write_index(&index, 3, &self::shards(&paths), &parts).unwrap();
        assert!(load_merged(&index).unwrap_err().contains("no shard holds its part w/part_2"));
        assert!(load_merged(&paths[0]).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory for a test.
    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("graphc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The shards at `paths`, each holding worker 0's updates to step 3 and worker 1's to 1.
    fn shards(paths: &[PathBuf]) -> Vec<Shard> {
        paths.iter().map(|p| Shard { path: p.clone(), settled: vec![3, 1] }).collect()
    }

    /// Shards of `w` (a variable f32[2]) for tasks 0 and 1 saying step `step` (none: no step),
    /// written where the index at `index` names them for step 3.
    fn two_shards(index: &Path, step: Option<u64>) -> Vec<PathBuf> {
        use graphc_ir::{DType, TensorType};
        let t = graphc_runtime::Tensor::from_f32(vec![1.0, 2.0], &TensorType::new(DType::F32, vec![2])).unwrap();
        (0..2)
            .map(|i| {
                let p = shard_path(index, i, 3);
                let snap = vec![(format!("w{i}"), Some(std::sync::Arc::new(t.clone())))];
                std::fs::write(&p, checkpoint::encode(&snap, step).unwrap()).unwrap();
                p
            })
            .collect()
    }

    fn session() -> Session {
        let m = graphc_ir::parse_module(
            "graph @g() -> (w: f32[2]) {\n  %w = variable {name = \"w0\"} : var<f32[2]>\n  %r = read %w : f32[2]\n  return %r\n}\n",
        )
        .unwrap();
        Session::new(m, Default::default()).unwrap()
    }

    #[test]
    fn a_truncated_or_malformed_index_says_what_is_wrong_naming_the_file() {
        let dir = tempdir("bad-index");
        let index = dir.join("ckpt");
        let shards = two_shards(&index, Some(3));
        write_index(&index, 3, &self::shards(&shards), &Parts::default()).unwrap();
        assert_eq!(load_merged(&index).unwrap().unwrap().values.len(), 2);
        let whole = std::fs::read(&index).unwrap();
        // Cut anywhere, it is a truncated index, not a safetensors file with a bad header.
        for cut in 1..whole.len() {
            std::fs::write(&index, &whole[..cut]).unwrap();
            let want = format!("{} is a truncated checkpoint index: its JSON stops after {cut} bytes", index.display());
            let e = load_merged(&index).unwrap_err();
            assert!(e.starts_with(&want), "cut at {cut}: {e}");
            assert!(read_index(&index).unwrap_err().starts_with(&want));
            assert!(restore_shard(&session(), &index, 0, 2, 2).unwrap_err().starts_with(&want));
        }
        // Every field checked: the file, the field, what was expected and what came.
        let text = String::from_utf8(whole).unwrap();
        let at = index.display().to_string();
        for (from, to, why) in [
            ("\"step\": 3", "\"step\": -1", format!("{at}: the checkpoint index's step is -1; expected the steps done, a whole number from 0 to 18446744073709551615")),
            ("\"step\": 3", "\"step\": \"ten\"", format!("{at}: the checkpoint index's step is \"ten\"; expected the steps done")),
            ("\"step\": 3", "\"step\": 1e23", format!("{at}: the checkpoint index's step is 1e+23; expected the steps done")),
            ("\"step\": 3", "\"stpe\": 3", format!("{at}: the checkpoint index has a field \"stpe\", which graphc does not know")),
            ("\"step\": 3,", "", format!("{at}: the checkpoint index has no \"step\"; expected the steps done")),
            ("\"step\": 3", "\"step\": 3, \"rows\": {\"w\": 0}", format!("{at}: the checkpoint index's rows.w is 0; expected a number of parts, at least 1")),
            ("\"graphc-sharded-checkpoint\"", "\"graphc\"", format!("{at} is not a checkpoint index (graphc's sharded checkpoint JSON): its format is \"graphc\"; expected \"graphc-sharded-checkpoint\"")),
        ] {
            assert!(text.contains(from), "{text}");
            std::fs::write(&index, text.replacen(from, to, 1)).unwrap();
            let e = load_merged(&index).unwrap_err();
            assert!(e.starts_with(&why), "{from} -> {to}:\n{e}\nwanted:\n{why}");
        }
        let e = load_merged(&{
            std::fs::write(&index, "{\"format\": \"graphc-sharded-checkpoint\", \"step\": 3, \"shards\": []}").unwrap();
            index.clone()
        })
        .unwrap_err();
        assert!(
            e.starts_with(&format!("{at}: the checkpoint index's shards is []; expected the shards' file names")),
            "{e}"
        );
        let hand = |settled: &str| {
            let json = format!("{{\"format\": \"graphc-sharded-checkpoint\", \"step\": 3, \"shards\": [\"a\", \"b\"], \"settled\": {settled}}}");
            std::fs::write(&index, json).unwrap();
            read_index(&index)
        };
        assert_eq!(hand("[[3], [2]]").unwrap().unwrap().settled, [[3], [2]]);
        for bad in ["[[3]]", "[3, 2]", "[[3], [-1]]", "{}"] {
            let e = hand(bad).unwrap_err();
            assert!(e.starts_with(&format!("{at}: the checkpoint index's settled is ")), "{bad}: {e}");
            assert!(e.contains("expected per shard, a list of each worker's last step"), "{bad}: {e}");
        }
        // A safetensors file is no index: the plain reader takes it.
        assert!(load_merged(&shards[0]).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_shard_of_another_step_than_its_index_is_refused_naming_both() {
        let dir = tempdir("shard-step");
        let index = dir.join("ckpt");
        let shards = two_shards(&index, Some(2));
        write_index(&index, 3, &self::shards(&shards), &Parts::default()).unwrap();
        let want =
            format!("{}: the shard is of step 2, but its index {} is of step 3", shards[0].display(), index.display());
        let e = load_merged(&index).unwrap_err();
        assert!(e.starts_with(&want), "{e}");
        let e = restore_shard(&session(), &index, 0, 2, 2).unwrap_err();
        assert!(e.starts_with(&want), "{e}");
        // A shard that says no step.
        let shards = two_shards(&index, None);
        let e = load_merged(&index).unwrap_err();
        assert!(e.starts_with(&format!("{}: the shard says no step", shards[0].display())), "{e}");
        assert!(e.contains(&format!("its index {} is of step 3", index.display())), "{e}");
        // Of the index's step, it restores.
        two_shards(&index, Some(3));
        let restored = Restored { step: 3, settled: vec![3, 1] };
        assert_eq!(restore_shard(&session(), &index, 0, 2, 2), Ok(Some(restored)));
        // Of a cluster with another number of workers: each worker's updates to the step.
        let restored = Restored { step: 3, settled: vec![3, 3, 3] };
        assert_eq!(restore_shard(&session(), &index, 0, 2, 3), Ok(Some(restored)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
