//! The files a command reads and writes, checked before it does any work: every output can be
//! written as `fsutil` writes (no device, FIFO, socket, directory or missing directory; not
//! `-`), and none replaces what the command reads or another output (`fsutil::check_outputs`).

use super::load::is_onnx;
use anyhow::{anyhow, bail};
use graphc_runtime::{feeds, fsutil};
use std::path::{Path, PathBuf};

fn refs(v: &[(String, PathBuf)]) -> Vec<(&str, &Path)> {
    v.iter().map(|(w, p)| (w.as_str(), p.as_path())).collect()
}

/// What a command reads and writes, each file with what it is for messages (`--log`, `the
/// model`).
#[derive(Debug, Default)]
pub struct Files {
    reads: Vec<(String, PathBuf)>,
    /// Inputs that one output may replace: how a run goes on from the checkpoint it restored,
    /// or refines the profile it read. (What, path, the output's flag.)
    updated: Vec<(String, PathBuf, &'static str)>,
    writes: Vec<(String, PathBuf)>,
    /// Outputs in a directory made when they are written (`--out-dir`'s): only compared.
    in_dirs: Vec<(String, PathBuf)>,
}

impl Files {
    /// A command on `model` (with an ONNX model's external data, or the weights files a `.gir`
    /// names) fed `--input` flags (malformed ones are left for the feeds to report).
    pub fn reading(model: &Path, input_flags: &[String]) -> Files {
        let mut files = Files::default();
        files.read("the model", model);
        if is_onnx(model) {
            for data in graphc_onnx::external_data_files(model).unwrap_or_default() {
                files.read("the model's external data", &data);
            }
        } else if model.as_os_str() != "-" {
            for weights in graphc_ir::weights::files_named_in(model) {
                files.read("the model's weights file", &weights);
            }
        }
        for (name, path) in feeds::parse_input_flags(input_flags).unwrap_or_default() {
            files.read(&format!("the --input file of '{name}'"), &path);
        }
        files
    }

    pub fn read(&mut self, what: &str, path: &Path) -> &mut Files {
        self.reads.push((what.to_string(), path.to_path_buf()));
        self
    }

    /// An input that output `flag` alone may replace.
    pub fn updated(&mut self, what: &str, path: Option<&Path>, flag: &'static str) -> &mut Files {
        if let Some(p) = path {
            self.updated.push((what.to_string(), p.to_path_buf(), flag));
        }
        self
    }

    pub fn write(&mut self, flag: &str, path: Option<&Path>) -> &mut Files {
        if let Some(p) = path {
            self.writes.push((flag.to_string(), p.to_path_buf()));
        }
        self
    }

    /// Files of `flag`'s directory, written there when the run ends.
    pub fn write_in_dir(&mut self, flag: &str, paths: impl IntoIterator<Item = PathBuf>) -> &mut Files {
        self.in_dirs.extend(paths.into_iter().map(|p| (flag.to_string(), p)));
        self
    }

    /// The error for the first output that cannot be written or would replace another file.
    pub fn check(&self) -> anyhow::Result<()> {
        for (what, path) in &self.writes {
            if path.as_os_str() == "-" {
                bail!("{what} -: give a file; '-' names no file here");
            }
            fsutil::check_writable(path).map_err(|e| anyhow!("{what} {}: cannot write it: {e}", path.display()))?;
        }
        for (what, path) in &self.in_dirs {
            let dir = fsutil::parent_dir(path);
            if let Some(t) = std::fs::metadata(dir).ok().map(|m| m.file_type()).filter(|t| !t.is_dir()) {
                bail!("{what} {}: it is {}, not a directory", dir.display(), fsutil::file_kind(t));
            }
            if dir.is_dir() {
                fsutil::check_writable(path).map_err(|e| anyhow!("{what} {}: cannot write it: {e}", path.display()))?;
            }
        }
        let mut outputs = refs(&self.writes);
        outputs.extend(refs(&self.in_dirs));
        for (what, path, flag) in &self.updated {
            let others: Vec<(&str, &Path)> = outputs.iter().filter(|(w, _)| w != flag).copied().collect();
            fsutil::check_outputs(&[(what, path)], &others).map_err(|e| anyhow!(e))?;
        }
        fsutil::check_outputs(&refs(&self.reads), &outputs).map_err(|e| anyhow!(e))
    }
}
