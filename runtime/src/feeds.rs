//! A step's feeds as `graphc run` and AOT-compiled programs take them from a command line:
//! `NAME=PATH.npy` flags, checked against the graphs' inputs, and seeded random data for the
//! inputs not given. Both front ends call these, so their errors are the same lines.

use crate::limits::{check_tensor_size, human, tensor_bytes};
use crate::npy;
use crate::random::random_input;
use crate::tensor::Tensor;
use graphc_ir::{Graph, Type};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// `--input NAME=PATH.npy` flags by input name (a leading `%` dropped); an error for a flag of
/// another form or a name given twice.
pub fn parse_input_flags(flags: &[String]) -> Result<BTreeMap<&str, PathBuf>, String> {
    let mut out = BTreeMap::new();
    for f in flags {
        let (name, path) = f
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| format!("--input '{f}' is not of the form NAME=PATH.npy"))?;
        let name = name.trim_start_matches('%');
        if out.insert(name, PathBuf::from(path)).is_some() {
            return Err(format!("input '{name}' is given twice"));
        }
    }
    Ok(out)
}

/// An error naming the first given input that none of `graphs` has, with the closest name.
pub fn check_input_names(given: &BTreeMap<&str, PathBuf>, graphs: &[&Graph]) -> Result<(), String> {
    let names: Vec<&str> =
        graphs.iter().flat_map(|g| g.inputs().iter().filter_map(|&v| g.values[v].name.as_deref())).collect();
    for &name in given.keys() {
        if !names.contains(&name) {
            let which = graphs.iter().map(|g| format!("@{}", g.name)).collect::<Vec<_>>().join(", ");
            let hint = graphc_ir::suggest::closest(name, names.iter().copied())
                .map(|s| format!("did you mean '{s}'? "))
                .unwrap_or_default();
            let list =
                if names.is_empty() { "it has none".to_string() } else { format!("inputs are {}", names.join(", ")) };
            return Err(format!("--input '{name}': {which} has no input of that name; {hint}{list}"));
        }
    }
    Ok(())
}

/// Graph `g`'s inputs by name: each read from its file in `given`, which must hold exactly
/// the input's type, or else seeded random data (each such input appended to `random` as
/// `NAME TYPE`), no tensor larger than `max_bytes`. Each takes its bytes from `room`, what the
/// step's inputs may still take of the memory limit, before it is read or made: a file's
/// header says its type and size, so a file of the wrong shape or too large is refused unread.
pub fn graph_feeds(
    g: &Graph,
    given: &BTreeMap<&str, PathBuf>,
    seed: u64,
    max_bytes: u64,
    room: &mut u64,
    random: &mut Vec<String>,
) -> Result<BTreeMap<String, Arc<Tensor>>, String> {
    let name = &g.name;
    let mut feeds = BTreeMap::new();
    for &v in g.inputs() {
        let input = g.values[v].name.clone().unwrap_or_default();
        let Type::Tensor(want) = &g.values[v].ty else {
            return Err(format!("input '{input}' of @{name} is a {}; only tensors can be fed", g.values[v].ty));
        };
        let mut take = |bytes: u64, from: &str| {
            if bytes > *room {
                return Err(format!(
                    "input '{input}' of @{name}: {from} takes {}, more than the {} the memory limit leaves for the inputs",
                    human(bytes),
                    human(*room)
                ));
            }
            *room -= bytes;
            Ok(())
        };
        let t = match given.get(input.as_str()) {
            Some(path) => {
                let file = npy::NpyFile::open(path).map_err(|e| format!("input '{input}': {e}"))?;
                if &file.ty() != want {
                    return Err(format!(
                        "input '{input}' of @{name}: expected {want}, got {} from {}",
                        file.ty(),
                        path.display()
                    ));
                }
                take(file.bytes(), &path.display().to_string())?;
                file.read().map_err(|e| format!("input '{input}': {e}"))?
            }
            None => {
                check_tensor_size(want, max_bytes).map_err(|m| format!("input '{input}' of @{name}: {m}"))?;
                take(tensor_bytes(want).unwrap_or(u64::MAX), &format!("random data of type {want}"))?;
                random.push(format!("{input} {want}"));
                random_input(g, v, seed).ok_or_else(|| format!("input '{input}' of @{name} is not a tensor"))??
            }
        };
        feeds.insert(input, Arc::new(t));
    }
    Ok(feeds)
}

/// The graphs a run takes, of `all` (the graphs of `source`): those named in `wanted` (a
/// leading `@` dropped); else the only one; else all of them when they are partitions of one
/// step (`partitioned`); else the first, with a note to print saying so.
pub fn select_graphs(
    wanted: &[String],
    source: &str,
    all: &[String],
    partitioned: bool,
) -> Result<(Vec<String>, Option<String>), String> {
    let listing = || all.iter().map(|n| format!("@{n}")).collect::<Vec<_>>().join(", ");
    if !wanted.is_empty() {
        let mut out = Vec::new();
        for name in wanted {
            let bare = name.trim_start_matches('@');
            if !all.iter().any(|g| g == bare) {
                let hint = graphc_ir::suggest::closest(bare, all.iter().map(String::as_str))
                    .map(|s| format!("did you mean @{s}? "))
                    .unwrap_or_default();
                return Err(format!("{source} has no graph @{bare}; {hint}its graphs are {}", listing()));
            }
            out.push(bare.to_string());
        }
        return Ok((out, None));
    }
    match all {
        [] => Err(format!("{source} holds no graph to run")),
        [g] => Ok((vec![g.clone()], None)),
        _ if partitioned => Ok((all.to_vec(), None)),
        [g, ..] => {
            let note = format!("{source} has {} graphs ({}); running @{g} (choose with --graph)", all.len(), listing());
            Ok((vec![g.clone()], Some(note)))
        }
    }
}
