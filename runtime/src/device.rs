//! Devices with memory of their own (a GPU): the seam through which an executor keeps a
//! graph's tensors in a device's memory between the kernels that run there, and copies them
//! only where a value must be on the host: at send, at a fetch, and for an op the device has
//! no kernel for (which placement keeps off such a device: in a partition, the loop counters
//! and conditions the host keeps, and state: a variable's reads and assigns).
//!
//! A backend gives three things: a [`Device`] that copies host tensors in, the
//! [`DeviceTensor`]s that live there, and, for the nodes it runs there, [`Kernel`]s whose
//! [`Kernel::on_device`] is a [`DeviceKernel`] over device tensors. [`Residency`] is the
//! executor's side: which tensors are already on the device, and what crossed.
//!
//! [`Kernel`]: crate::Kernel
//! [`Kernel::on_device`]: crate::Kernel::on_device

use crate::tensor::Tensor;
use graphc_ir::TensorType;
use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A device with its own memory.
pub trait Device: Send + Sync + Debug {
    /// What messages call it ("GPU 0").
    fn name(&self) -> String;
    /// Copies a host tensor into the device's memory; an error (the dtype it cannot hold, its
    /// memory full, the device failing) says why in one line.
    fn upload(&self, t: &Tensor) -> Result<Arc<dyn DeviceTensor>, String>;
}

/// A tensor in a device's memory, freed when the last handle to it drops.
pub trait DeviceTensor: Send + Sync + Debug {
    fn ty(&self) -> TensorType;
    /// Copies it to the host.
    fn download(&self) -> Result<Tensor, String>;
    /// The same elements in row-major order as type `ty` (as many elements): a reshape,
    /// which shares the memory.
    fn reshaped(&self, ty: &TensorType) -> Result<Arc<dyn DeviceTensor>, String>;
    /// For the device's own kernels, to reach their representation.
    fn as_any(&self) -> &dyn Any;
}

/// A node's kernel on tensors in its device's memory.
pub trait DeviceKernel: Send + Sync + Debug {
    /// Runs the node on its operands, all in the device's memory, and returns its results
    /// there; an error is a run-time failure of the node.
    fn run(&self, operands: &[Arc<dyn DeviceTensor>]) -> Result<Vec<Arc<dyn DeviceTensor>>, String>;
}

/// What crossed between host and device memory, counted since the executor was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Copies to the device, and their bytes.
    pub uploads: u64,
    pub upload_bytes: u64,
    /// Copies to the host, and their bytes.
    pub downloads: u64,
    pub download_bytes: u64,
}

/// Host tensors' copies on a device, by the host tensor's address (held by the weak reference).
type Kept = HashMap<usize, (Weak<Tensor>, Arc<dyn DeviceTensor>)>;

/// A device as its executors share it: the device, the long-lived host tensors it holds
/// copies of, and what crossed.
///
/// A long-lived host tensor (a variable's value, a constant) copied in with `keep` is kept on
/// the device as long as the host tensor lives (a weak reference to it is the key): weights
/// and constants are copied once, not once per step, until the variable is assigned a new
/// tensor. A kept copy is never stale: host tensors are changed in place only through
/// `Arc::get_mut` (which refuses while a weak reference exists), `Arc::make_mut` or
/// `Arc::try_unwrap` (which move the value to a new allocation or out of it first).
#[derive(Debug)]
pub struct Residency {
    device: Arc<dyn Device>,
    kept: Mutex<Kept>,
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    downloads: AtomicU64,
    download_bytes: AtomicU64,
}

impl Residency {
    pub fn new(device: Arc<dyn Device>) -> Self {
        Residency {
            device,
            kept: Mutex::default(),
            uploads: AtomicU64::new(0),
            upload_bytes: AtomicU64::new(0),
            downloads: AtomicU64::new(0),
            download_bytes: AtomicU64::new(0),
        }
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// Host tensor `t` in the device's memory: the copy kept from before, or a new one, kept
    /// while `t` lives when `keep` (a long-lived tensor), else the caller's alone.
    pub fn upload(&self, t: &Arc<Tensor>, keep: bool) -> Result<Arc<dyn DeviceTensor>, String> {
        let key = Arc::as_ptr(t) as usize;
        if keep {
            if let Some((weak, d)) = self.kept().get(&key) {
                // The weak reference keeps the allocation, so the address is this tensor's.
                if weak.upgrade().is_some_and(|w| Arc::ptr_eq(&w, t)) {
                    return Ok(d.clone());
                }
            }
            // Copies of tensors that died go before the new one takes room.
            self.forget_dead();
        }
        let d = self.device.upload(t)?;
        if d.ty() != t.ty() {
            return Err(format!("{} made {} of a tensor of type {}", self.device.name(), d.ty(), t.ty()));
        }
        self.uploads.fetch_add(1, Ordering::Relaxed);
        self.upload_bytes.fetch_add(crate::budget::bytes_of(t), Ordering::Relaxed);
        if keep {
            self.kept().insert(key, (Arc::downgrade(t), d.clone()));
        }
        Ok(d)
    }

    /// Device tensor `d` copied to the host.
    pub fn download(&self, d: &dyn DeviceTensor) -> Result<Arc<Tensor>, String> {
        let t = d.download()?;
        if t.ty() != d.ty() {
            return Err(format!("{} gave back {} for a tensor of type {}", self.device.name(), t.ty(), d.ty()));
        }
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.download_bytes.fetch_add(crate::budget::bytes_of(&t), Ordering::Relaxed);
        Ok(Arc::new(t))
    }

    /// Drops the copies of kept host tensors that have died.
    pub fn forget_dead(&self) {
        self.kept().retain(|_, (w, _)| w.strong_count() > 0);
    }

    /// What crossed so far.
    pub fn transfers(&self) -> Transfers {
        Transfers {
            uploads: self.uploads.load(Ordering::Relaxed),
            upload_bytes: self.upload_bytes.load(Ordering::Relaxed),
            downloads: self.downloads.load(Ordering::Relaxed),
            download_bytes: self.download_bytes.load(Ordering::Relaxed),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
