//! A step's outputs as `graphc run` and AOT-compiled programs show them: one `.npy` file per
//! tensor in a directory, or a line per output summarizing it. Both front ends call these, so
//! their files and lines are the same.

use crate::npy;
use crate::value::RtValue;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes each tensor output to DIR/FILE.npy ([`output_file_name`]), creating DIR; returns a
/// line per output saying where it went. Two outputs that would get the same file are refused
/// before anything is written, rather than one silently overwriting the other.
pub fn write_outputs(dir: &Path, named: &[(String, &RtValue)]) -> Result<Vec<String>, String> {
    let tensors: Vec<&str> = named.iter().filter(|(_, v)| v.as_tensor().is_some()).map(|(n, _)| n.as_str()).collect();
    check_output_names(dir, &tensors)?;
    crate::fsutil::create_dir(dir).map_err(|e| format!("cannot create the output directory {}: {e}", dir.display()))?;
    let mut lines = Vec::new();
    for (name, v) in named {
        let path = output_path(dir, name);
        match v {
            RtValue::Tensor(t) => {
                npy::write_npy(&path, t).map_err(|e| format!("output '{name}': {e}"))?;
                lines.push(format!("{name}: {} -> {}", t.ty(), path.display()));
            }
            other => lines.push(format!("{name}: {} (not written: not a tensor)", other.ty())),
        }
    }
    Ok(lines)
}

/// A line per output: a tensor's type and first elements, or another value's type.
pub fn output_summaries(named: &[(String, &RtValue)]) -> Vec<String> {
    named
        .iter()
        .map(|(name, v)| match v {
            RtValue::Tensor(t) => format!("{name}: {}", t.summary(8)),
            other => format!("{name}: {}", other.ty()),
        })
        .collect()
}

/// The one-element tensor outputs as `name=value`, comma-separated (a step's progress line).
pub fn scalar_summary(named: &[(String, &RtValue)]) -> String {
    named
        .iter()
        .filter_map(|(n, v)| v.as_tensor().filter(|t| t.len() == 1).map(|t| format!("{n}={}", t.to_f64_vec()[0])))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An error when two of `names` would be written to the same file of `dir` (so `graphc train`
/// can tell before it trains, not after).
pub fn check_output_names(dir: &Path, names: &[&str]) -> Result<(), String> {
    let mut files: BTreeMap<String, &str> = BTreeMap::new();
    for name in names {
        let file = format!("{}.npy", output_file_name(name));
        if let Some(other) = files.insert(file.clone(), name) {
            return Err(format!(
                "outputs '{other}' and '{name}' would both be written to {}; rename one of them",
                dir.join(file).display()
            ));
        }
    }
    Ok(())
}

/// The file output `name` is written to in `dir`: `DIR/FILE.npy` ([`output_file_name`]).
pub fn output_path(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join(format!("{}.npy", output_file_name(name)))
}

/// The file name (without `.npy`) an output is written to: characters outside
/// [A-Za-z0-9._-] become '_', and so does a leading '.' (no hidden files, no `..`); an empty
/// name is `_`; names are cut at 200 bytes (a file name may have 255).
pub fn output_file_name(name: &str) -> String {
    let mut file: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| if (c.is_ascii_alphanumeric() || "._-".contains(c)) && !(i == 0 && c == '.') { c } else { '_' })
        .collect();
    // Only ASCII is left, so any byte is a character boundary.
    file.truncate(200);
    if file.is_empty() {
        file.push('_');
    }
    file
}
