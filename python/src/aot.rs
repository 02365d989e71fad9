//! `graphc.compile`: what `graphc compile` does for CPU targets (`graphc::aot`): the module
//! as the JIT's pipeline leaves it (with `shapes=` sizing symbolic dims, `inputs=` fixing
//! inputs' values and `restore=` giving the variables a checkpoint's values) into an
//! executable, an object with its C header, or a static library.

use crate::errors::{error, OrRaise};
use anyhow::anyhow;
use graphc::aot::{self, AotOptions, Emit};
use graphc::driver::{self, Files};
use graphc::lower::cpu::object::Cpu;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;

/// `compile(path, output, *, emit="exe", graph=None, target=None, cpu="baseline",
/// weights_file=None, restore=None, inputs=None, shapes=None)`: the paths written.
#[pyfunction]
#[pyo3(signature = (path, output, *, emit="exe", graph=None, target=None, cpu="baseline", weights_file=None, restore=None, inputs=None, shapes=None))]
#[allow(clippy::too_many_arguments)]
pub fn compile(
    py: Python<'_>,
    path: PathBuf,
    output: PathBuf,
    emit: &str,
    graph: Option<String>,
    target: Option<String>,
    cpu: &str,
    weights_file: Option<PathBuf>,
    restore: Option<PathBuf>,
    inputs: Option<HashMap<String, PathBuf>>,
    shapes: Option<HashMap<String, u64>>,
) -> PyResult<Vec<PathBuf>> {
    let emit = match emit {
        "exe" => Emit::Exe,
        "obj" => Emit::Obj,
        "staticlib" => Emit::StaticLib,
        "mlir" | "ptx" => {
            return Err(error(format!(
                "emit='{emit}': GPU kernels are written by `graphc compile --target nvptx64-nvidia-cuda --emit {emit}`; graphc.compile writes CPU programs (exe, obj, staticlib)"
            )))
        }
        other => return Err(error(format!("emit='{other}': expected 'exe', 'obj' or 'staticlib'"))),
    };
    let cpu = match cpu {
        "baseline" => Cpu::Baseline,
        "native" => Cpu::Native,
        other => return Err(error(format!("cpu='{other}': expected 'baseline' or 'native'"))),
    };
    let aot = AotOptions { emit, target, cpu, weights_file };
    // As `--input NAME=PATH` and `--shape DIM=SIZE` flags, which the driver reads.
    let mut input_flags: Vec<String> = Vec::new();
    for (name, file) in inputs.unwrap_or_default() {
        input_flags.push(format!("{name}={}", file.display()));
    }
    let shape_flags: Vec<String> = shapes.unwrap_or_default().iter().map(|(d, n)| format!("{d}={n}")).collect();
    py.detach(|| -> anyhow::Result<Vec<PathBuf>> {
        // Where the files go, checked before the work of compiling.
        let mut files = Files::reading(&path, &input_flags);
        if let Some(ckpt) = &restore {
            files.read("the restored checkpoint", ckpt);
        }
        for (out, p) in aot::output_paths(&output, &aot).map_err(|e| anyhow!(e))? {
            files.write(out.what(), Some(&p));
        }
        files.check()?;
        let options = driver::import_options_for(&path, &input_flags, &shape_flags)?;
        let (file, mut m) = driver::load(&path, &options)?;
        driver::freeze_inputs(&mut m, &input_flags)?;
        if let Some(ckpt) = &restore {
            let loaded = driver::read_checkpoint(ckpt)?;
            graphc_runtime::checkpoint::into_module(&mut m, &loaded)
                .map_err(|e| anyhow!("restore={}: {e}", ckpt.display()))?;
        }
        let jit = graphc::backend::backend("jit").map_err(|e| anyhow!(e))?;
        let m = driver::optimize(jit, m, false, &file)?;
        let graphs: Vec<String> = match &graph {
            Some(g) => {
                let g = g.trim_start_matches('@');
                m.graph(g).ok_or_else(|| anyhow!("{}: no graph @{g}", file.name))?;
                vec![g.to_string()]
            }
            None => m.graphs.iter().map(|g| g.name.clone()).collect(),
        };
        let object = aot::compile(&m, &file.name, &graphs, &aot).map_err(|e| anyhow!("{}: {e}", file.name))?;
        aot::write(&object, &output, &aot).map_err(|e| anyhow!(e))
    })
    .or_raise()
}
