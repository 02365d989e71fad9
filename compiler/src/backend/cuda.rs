//! NVIDIA GPUs as a backend: the default pipeline, then the CPU backend's kernels, each that a
//! GPU can run replaced by its PTX kernel (`crate::lower::mlir::cuda`). A graph placed on a
//! GPU, or not placed at all, runs on an executor that keeps the GPU kernels' tensors in the
//! GPU's memory between them (`InterpExecutor::on_device`); elsewhere (a graph whose nodes
//! are on several devices) a GPU kernel copies its operands in and its results out.

use super::{Backend, CompileOptions, Compiled};
use crate::lower::mlir;
use graphc_cuda_runtime::CudaDevice;
use graphc_ir::{DeviceKind, DeviceSpec, Graph, Module, Node};
use graphc_runtime::{Executor, InterpExecutor, Residency};
use std::sync::{Arc, OnceLock};

#[derive(Debug)]
pub struct Cuda;

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }
    fn description(&self) -> &'static str {
        "The default pass pipeline, then elementwise and row kernels and tiled matrix products and convolutions, pools and column reductions as PTX on the first NVIDIA GPU (through MLIR and the CUDA driver); what the GPU cannot run on the CPU backend"
    }
    fn pipeline(&self) -> &'static str {
        crate::passes::DEFAULT_PIPELINE
    }
    fn compile_with(&self, m: &Module, options: &CompileOptions) -> Result<Compiled, String> {
        let kernels = super::cranelift(m, options)?;
        kernels.table().name_tier("gpu");
        let tier = mlir::cuda::compile_into(m, kernels.table())?;
        Ok(Compiled::cpu(kernels, tier.compile_time, None))
    }

    /// On a GPU, or on no device: the interpreter keeping the GPU kernels' tensors on the GPU.
    fn executor(&self, device: Option<&DeviceSpec>, compiled: &Compiled) -> Option<Arc<dyn Executor>> {
        let on_gpu = device.is_none_or(|d| d.device.is_none_or(|(kind, _)| kind == DeviceKind::Gpu));
        let kernels = compiled.kernels.clone().filter(|_| on_gpu)?;
        Some(Arc::new(InterpExecutor::on_device(kernels, gpu().clone())))
    }

    /// The GPU's kernels read no views: a slice stays a node of its own.
    fn fuses_view(&self, _g: &Graph, _n: Node) -> bool {
        false
    }

    /// The GPU, for the nodes placed on a GPU or on no device that it runs (with a kernel,
    /// or needing none: what it accepts there); placement gives a GPU no others.
    fn runs_on(&self, g: &Graph, n: Node) -> DeviceKind {
        if mlir::cuda::for_the_gpu(g, n) && self.accepts(DeviceKind::Gpu, g, n).is_ok() {
            DeviceKind::Gpu
        } else {
            DeviceKind::Cpu
        }
    }
}

/// GPU 0 as every executor on it shares it: one memory, so the weights several graphs or
/// sessions read are copied there once.
fn gpu() -> &'static Arc<Residency> {
    static GPU: OnceLock<Arc<Residency>> = OnceLock::new();
    GPU.get_or_init(|| Arc::new(Residency::new(Arc::new(CudaDevice))))
}
