//! `graphc train`'s data: a directory of `.npy` arrays, `NAME.npy` for the step graph's input
//! `%NAME`, one row (leading index) per example. Checked against the step's inputs when
//! loaded: the batch size is the inputs' leading dim (shapes are static), every array holds the
//! same number of examples, each of the input's per-example shape and dtype. Each epoch visits
//! the examples in a permutation drawn from (seed, epoch) alone, cut into batches, a last
//! partial batch dropped; a [`Position`] (epoch, batch within it) is all a checkpoint needs to
//! take up the same sequence of batches again.

use anyhow::{anyhow, bail};
use graphc_ir::{Graph, TensorType, Type};
use graphc_runtime::limits::human;
use graphc_runtime::random::SplitMix64;
use graphc_runtime::{npy, Tensor};
use ndarray::Axis;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One array of the data set: the input it feeds and its examples.
#[derive(Debug)]
pub struct Column {
    /// The step graph's input, without `%`.
    pub input: String,
    pub path: PathBuf,
    /// The whole array: `[examples, per-example shape...]`.
    pub data: Tensor,
}

/// The arrays feeding a step graph, checked against its inputs.
#[derive(Debug)]
pub struct Dataset {
    /// In the order of the step graph's inputs.
    pub columns: Vec<Column>,
    /// Examples in every array.
    pub examples: u64,
    /// Examples per batch: the step inputs' leading dim.
    pub batch: u64,
}

/// Where in the data the next batch comes from: the epoch, and the batch within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub epoch: u64,
    pub batch: u64,
}

impl Dataset {
    /// Reads `dir/NAME.npy` for each input of `g` and checks it. `batch` is `--batch`, which
    /// must agree with the inputs' leading dim; the arrays together may take at most
    /// `memory_limit` bytes, checked from their headers before they are read. Every error is one line naming the file or the
    /// input; `.npy` files that feed no input are a warning.
    pub fn load(dir: &Path, g: &Graph, batch: Option<u64>, memory_limit: u64) -> anyhow::Result<Dataset> {
        if let Some(t) = std::fs::metadata(dir).ok().map(|m| m.file_type()).filter(|t| !t.is_dir()) {
            bail!(
                "--data {}: it is {}; expected a directory of .npy files",
                dir.display(),
                graphc_runtime::fsutil::file_kind(t)
            );
        }
        let entries =
            std::fs::read_dir(dir).map_err(|e| anyhow!("--data {}: cannot read the directory: {e}", dir.display()))?;
        let mut files: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| anyhow!("--data {}: cannot read the directory: {e}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".npy") {
                files.push(stem.to_string());
            }
        }
        files.sort();

        // The inputs: name, batch type.
        let mut inputs: Vec<(String, TensorType)> = Vec::new();
        for &v in g.inputs() {
            let name = g.values[v].name.clone().unwrap_or_default();
            let Type::Tensor(ty) = &g.values[v].ty else {
                bail!("input '{name}' of @{} is a {}; --data feeds only tensors", g.name, g.values[v].ty);
            };
            if ty.shape.is_empty() {
                bail!(
                    "input '{name}' of @{} is a scalar ({ty}); --data feeds batches, which need a leading batch axis",
                    g.name
                );
            }
            inputs.push((name, ty.clone()));
        }
        if inputs.is_empty() {
            bail!("@{} has no inputs for --data to feed", g.name);
        }
        let missing: Vec<String> =
            inputs.iter().filter(|(n, _)| !files.contains(n)).map(|(n, ty)| format!("'{n}' ({ty})")).collect();
        if !missing.is_empty() {
            bail!(
                "--data {}: no NAME.npy for input{} {} of @{}; every input of the step graph is fed from DIR/NAME.npy",
                dir.display(),
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", "),
                g.name
            );
        }
        for f in &files {
            if !inputs.iter().any(|(n, _)| n == f) {
                let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
                tracing::warn!(
                    "{} feeds no input of @{} (its inputs: {}); ignored",
                    dir.join(format!("{f}.npy")).display(),
                    g.name,
                    names.join(", ")
                );
            }
        }

        // The batch size: every input's leading dim, and --batch if given.
        let (first, first_ty) = &inputs[0];
        let size = first_ty.shape[0];
        if let Some((name, ty)) = inputs.iter().find(|(_, ty)| ty.shape[0] != size) {
            bail!(
                "the inputs of @{} disagree on the batch size (their leading dim): '{first}' is {first_ty}, '{name}' is {ty}",
                g.name
            );
        }
        if let Some(b) = batch {
            if b != size {
                bail!(
                    "--batch {b}: input '{first}' of @{} takes batches of {size} ({first_ty}); shapes are static, so the batch is {size}",
                    g.name
                );
            }
        }
        if size == 0 {
            bail!("input '{first}' of @{} takes batches of 0 examples ({first_ty})", g.name);
        }

        // Every file's header first: types and sizes are checked, and the whole set against
        // the memory limit, before any data is read.
        let mut files: Vec<(&String, PathBuf, npy::NpyFile)> = Vec::new();
        for (name, ty) in &inputs {
            let path = dir.join(format!("{name}.npy"));
            let file = npy::NpyFile::open(&path).map_err(|e| anyhow!("{e}"))?;
            let got = file.ty();
            let per_example = &ty.shape[1..];
            if got.dtype != ty.dtype || got.shape.len() != ty.shape.len() || &got.shape[1..] != per_example {
                let want = format!(
                    "{}[N{}]",
                    ty.dtype.name(),
                    per_example.iter().map(|d| format!(",{d}")).collect::<String>()
                );
                bail!(
                    "{} holds {got}, but input '{name}' of @{} takes batches {ty}: the file must be {want} (N examples)",
                    path.display(),
                    g.name
                );
            }
            files.push((name, path, file));
        }
        let bytes: u64 = files.iter().map(|(_, _, f)| f.bytes()).sum();
        if bytes > memory_limit {
            let each: Vec<String> = files
                .iter()
                .map(|(_, p, f)| {
                    format!("{} {}", p.file_name().unwrap_or_default().to_string_lossy(), human(f.bytes()))
                })
                .collect();
            // In bytes where the rounded sizes would read the same.
            let (need, have) = match (human(bytes), human(memory_limit)) {
                (a, b) if a == b => (format!("{bytes} bytes"), format!("{memory_limit} bytes")),
                sizes => sizes,
            };
            bail!(
                "--data {}: the data set takes {need} ({}), more than the memory limit of {have}; give a larger --memory-limit or a smaller data set",
                dir.display(),
                each.join(", "),
            );
        }
        let mut columns: Vec<Column> = Vec::new();
        for (name, path, file) in files {
            columns.push(Column { input: name.clone(), path, data: file.read().map_err(|e| anyhow!("{e}"))? });
        }
        let examples = columns[0].data.shape()[0] as u64;
        for c in &columns[1..] {
            let n = c.data.shape()[0] as u64;
            if n != examples {
                bail!(
                    "{} holds {n} example{} but {} holds {examples}; every array needs one row per example",
                    c.path.display(),
                    if n == 1 { "" } else { "s" },
                    columns[0].path.display()
                );
            }
        }
        if examples == 0 {
            bail!("{} holds no examples (its leading dim is 0)", columns[0].path.display());
        }
        if size > examples {
            bail!(
                "the batch of {size} (input '{first}' of @{}) is larger than the data set: {} holds {examples} example{}",
                g.name,
                columns[0].path.display(),
                if examples == 1 { "" } else { "s" }
            );
        }
        Ok(Dataset { columns, examples, batch: size })
    }

    /// The bytes its arrays take.
    pub fn bytes(&self) -> u64 {
        self.columns.iter().map(|c| graphc_runtime::budget::bytes_of(&c.data)).sum()
    }

    /// Whole batches in an epoch (a last partial one is dropped); at least 1.
    pub fn batches_per_epoch(&self) -> u64 {
        self.examples / self.batch
    }

    /// Where the batch of step `step` (counted from 0) comes from in a run that started at the
    /// first batch.
    pub fn position_of(&self, step: u64) -> Position {
        let per = self.batches_per_epoch();
        Position { epoch: step / per, batch: step % per }
    }

    /// The position after `p`. Epochs count modulo 2^64: a checkpoint may say any epoch (its
    /// permutation is drawn from the epoch alone), and the one after the last is 0.
    pub fn next(&self, p: Position) -> Position {
        if p.batch + 1 >= self.batches_per_epoch() {
            Position { epoch: p.epoch.wrapping_add(1), batch: 0 }
        } else {
            Position { epoch: p.epoch, batch: p.batch + 1 }
        }
    }

    /// The order of the examples in epoch `epoch`: a Fisher-Yates shuffle drawn from (seed,
    /// epoch) alone, so any epoch can be taken up again without replaying the earlier ones.
    pub fn permutation(&self, seed: u64, epoch: u64) -> Vec<usize> {
        let n = self.examples as usize;
        let mut order: Vec<usize> = (0..n).collect();
        // Two rounds of SplitMix64 mix the seed and the epoch into one stream's start.
        let mut rng = SplitMix64::new(SplitMix64::new(seed).next_u64() ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
        for i in (1..n).rev() {
            // Uniform in 0..=i by a widening multiply (no modulo bias to speak of).
            let j = ((rng.next_u64() as u128 * (i as u128 + 1)) >> 64) as usize;
            order.swap(i, j);
        }
        order
    }

    /// The batch at position `p` of an epoch whose order is `order`: one tensor per column,
    /// the step inputs' types.
    pub fn batch(&self, order: &[usize], p: Position) -> Vec<Arc<Tensor>> {
        let start = (p.batch * self.batch) as usize;
        let rows = &order[start..start + self.batch as usize];
        self.columns
            .iter()
            .map(|c| Arc::new(graphc_runtime::map_dtype!(&c.data, a => a.select(Axis(0), rows))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphc_ir::TensorData;

    fn dataset(examples: usize, batch: u64) -> Dataset {
        let data = Tensor::from_data(&[examples, 1], TensorData::F32((0..examples).map(|i| i as f32).collect()));
        let column = Column { input: "x".into(), path: "x.npy".into(), data: data.unwrap() };
        Dataset { columns: vec![column], examples: examples as u64, batch }
    }

    #[test]
    fn each_epoch_is_a_permutation_drawn_from_the_seed_and_the_epoch_alone() {
        let d = dataset(50, 8);
        let p = d.permutation(3, 7);
        let mut sorted = p.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_eq!(p, d.permutation(3, 7), "the same (seed, epoch), the same order");
        assert_ne!(p, d.permutation(3, 8), "another epoch, another order");
        assert_ne!(p, d.permutation(4, 7), "another seed, another order");
    }

    #[test]
    fn positions_walk_whole_batches_and_drop_the_rest() {
        let d = dataset(50, 8);
        assert_eq!(d.batches_per_epoch(), 6);
        let mut p = d.position_of(0);
        for step in 0..20 {
            assert_eq!(p, d.position_of(step));
            p = d.next(p);
        }
        assert_eq!(d.position_of(13), Position { epoch: 2, batch: 1 });
        // A checkpoint's epoch may be any u64 (it came from a file): the next one wraps.
        assert_eq!(d.next(Position { epoch: u64::MAX, batch: 5 }), Position { epoch: 0, batch: 0 });
        // A batch is the epoch's order cut at the position, row by row.
        let order = d.permutation(0, 2);
        let b = d.batch(&order, Position { epoch: 2, batch: 1 });
        let want: Vec<f64> = order[8..16].iter().map(|&i| i as f64).collect();
        assert_eq!(b[0].to_f64_vec(), want);
        assert_eq!(b[0].shape(), &[8, 1]);
    }
}
