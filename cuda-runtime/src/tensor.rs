//! Tensors kept in the GPU's memory between kernels, and the GPU as a runtime [`Device`]
//! that a device executor copies host tensors onto.

use crate::device::{download, upload, Buffer};
use graphc_ir::TensorType;
use graphc_runtime::{Device, DeviceTensor, Tensor};
use std::any::Any;
use std::sync::Arc;

/// An f32 tensor in device 0's memory: a buffer, shared by the reshapes of one tensor, and
/// the type this view gives its elements (row-major).
#[derive(Debug)]
pub struct GpuTensor {
    buffer: Arc<Buffer>,
    ty: TensorType,
}

impl GpuTensor {
    pub(crate) fn boxed(buffer: Buffer, ty: TensorType) -> Arc<dyn DeviceTensor> {
        Arc::new(GpuTensor { buffer: Arc::new(buffer), ty })
    }

    pub(crate) fn buffer(&self) -> &Buffer {
        &self.buffer
    }
}

impl DeviceTensor for GpuTensor {
    fn ty(&self) -> TensorType {
        self.ty.clone()
    }

    fn download(&self) -> Result<Tensor, String> {
        Tensor::from_f32(download(&self.buffer)?, &self.ty)
    }

    fn reshaped(&self, ty: &TensorType) -> Result<Arc<dyn DeviceTensor>, String> {
        if ty.dtype != self.ty.dtype || elements(ty) != Some(self.buffer.len) {
            return Err(format!("cannot view a GPU tensor of {} as {ty}", self.ty));
        }
        Ok(Arc::new(GpuTensor { buffer: self.buffer.clone(), ty: ty.clone() }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The first NVIDIA GPU, holding f32 tensors (what its kernels read and write).
#[derive(Debug, Default)]
pub struct CudaDevice;

impl Device for CudaDevice {
    fn name(&self) -> String {
        "GPU 0".to_owned()
    }

    fn upload(&self, t: &Tensor) -> Result<Arc<dyn DeviceTensor>, String> {
        let Tensor::F32(_) = t else {
            return Err(format!("the GPU holds f32 tensors, not {}", t.ty()));
        };
        let elements = t.f32_elements(None)?;
        Ok(GpuTensor::boxed(upload(&elements)?, t.ty()))
    }
}

/// A type's element count, when it fits in memory's indices.
pub(crate) fn elements(ty: &TensorType) -> Option<usize> {
    ty.shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}
