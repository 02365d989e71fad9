//! The CPU backend's compile half: elementwise kernels (a `fusion` of kind "loop", or a lone
//! elementwise op) lowered to Cranelift IR (`codegen.rs`, generic over the Cranelift module, so
//! the same lowering fills a JIT module or an object file) and JIT-compiled (`jit.rs`), and
//! matrix products (a lone matmul, or an "output" fusion of a matmul and its elementwise
//! epilogue) run by the run half (crate `graphc-cpu-runtime`) on the gemm crate's
//! microkernels before the generated epilogue. They run in place of the reference kernels
//! inside sessions; other nodes stay with the interpreter.

mod codegen;
mod describe;
mod jit;

pub use codegen::{host_isa, Emitter, Isa};

use crate::lower::plan::{self, KernelPlan};
use graphc_cpu_runtime::CpuKernel;
use graphc_ir::{Module, Node};
use graphc_runtime::{CompiledKernels, Operands, Tensor};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A compiled module: kernels for the nodes the backend took, by graph and node.
#[derive(Debug)]
pub struct CpuKernels {
    /// By graph name, then node: looked up for every node the interpreter runs, so without
    /// building a key. Each kernel keeps its code alive.
    kernels: HashMap<String, HashMap<Node, CpuKernel>>,
    /// How long compilation took.
    pub compile_time: Duration,
}

/// How kernels are compiled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// The instructions kernels may use.
    pub isa: Isa,
}

impl CompileOptions {
    /// The options the environment asks for: `GRAPHC_JIT_ISA=sse` leaves out AVX and the
    /// extensions after it (as on hosts without them), `native` (the default) uses what the
    /// host has.
    pub fn from_env() -> Result<CompileOptions, String> {
        let isa = match std::env::var("GRAPHC_JIT_ISA").as_deref() {
            Err(_) | Ok("native") => Isa::Native,
            Ok("sse") => Isa::Sse,
            Ok(other) => return Err(format!("GRAPHC_JIT_ISA: expected 'native' or 'sse', got '{other}'")),
        };
        Ok(CompileOptions { isa })
    }
}

impl CpuKernels {
    /// Compiles every node of the module the backend handles (the whole module's graphs,
    /// nested regions included), with the options of the environment
    /// ([`CompileOptions::from_env`]).
    pub fn compile(m: &Module) -> Result<Arc<CpuKernels>, String> {
        CpuKernels::compile_with(m, &CompileOptions::from_env()?)
    }

    /// Compiles every node of the module the backend handles, with `options`.
    pub fn compile_with(m: &Module, options: &CompileOptions) -> Result<Arc<CpuKernels>, String> {
        let start = Instant::now();
        let mut jit = jit::emitter(options.isa)?;
        let mut planned: Vec<(plan::Kernel, Option<cranelift_module::FuncId>)> = Vec::new();
        for k in plan::kernels(m) {
            let id = match k.plan.code() {
                Some(p) => Some(jit.define(p)?),
                None => None,
            };
            planned.push((k, id));
        }
        let mut entries = jit::link(jit)?;
        let mut kernels: HashMap<String, HashMap<Node, CpuKernel>> = HashMap::new();
        for (k, id) in planned {
            let entry = id.and_then(|id| entries.remove(&id));
            let kernel = match (&k.plan, entry) {
                (KernelPlan::Loop(plan), Some(entry)) => CpuKernel::Loop(describe::loop_kernel(plan, entry)),
                (KernelPlan::MatMul(plan), epilogue) => CpuKernel::MatMul(describe::matmul_kernel(plan, epilogue)?),
                (KernelPlan::Loop(_), None) => return Err("a loop kernel without code".into()),
            };
            kernels.entry(k.graph).or_default().insert(k.node, kernel);
        }
        Ok(Arc::new(CpuKernels { kernels, compile_time: start.elapsed() }))
    }

    /// How many nodes run compiled code.
    pub fn len(&self) -> usize {
        self.kernels.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl CompiledKernels for CpuKernels {
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>> {
        let k = self.kernels.get(graph)?.get(&node)?;
        Some(k.run(operands))
    }
}
