//! The crate's only unsafe code, and its only calls into the CUDA driver (through cudarc):
//! finding the driver library, the process-wide context, loading PTX, buffers in the device's
//! memory (copied in, allocated, copied back), and launching a kernel on them.
//!
//! Nothing of cudarc's is called before the driver library is known to be there (its dynamic
//! loading panics otherwise), and every call is made under `catch_unwind`, so that whatever
//! panic is left in the bindings (a symbol an old driver lacks) is an error too.
#![allow(unsafe_code)]

use cudarc::driver::{sys, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Threads per block of every launch.
pub const THREADS_PER_BLOCK: usize = 256;

/// Whether kernels can run here: `Err(one line saying why not)` (no CUDA driver library, no
/// device, ...). Opens the process-wide context on first use.
pub fn available() -> Result<(), String> {
    device().map(|_| ())
}

/// The context of device 0 (its primary context), opened once per process; an error opening
/// it is kept too (the driver's initialization does not recover).
struct Device {
    /// The context's default stream: every copy and launch goes on it, in call order.
    stream: Arc<CudaStream>,
}

fn device() -> Result<&'static Device, String> {
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    DEVICE.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Device, String> {
    // SAFETY: only opens (dlopen) and closes the driver library under each of its names.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so) found".to_owned());
    }
    guarded("cannot open CUDA device 0", || {
        let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| cuda("cannot open CUDA device 0", e))?;
        Ok(Device { stream: ctx.default_stream() })
    })
}

/// PTX loaded on device 0, and the kernels looked up in it so far.
#[derive(Debug)]
pub struct GpuCode {
    module: Arc<CudaModule>,
    stream: Arc<CudaStream>,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

/// Loads PTX (the text of a module) on device 0, the driver compiling it for the device; an
/// error when there is no device or the driver rejects it.
pub fn load(ptx: &str) -> Result<Arc<GpuCode>, String> {
    if ptx.contains('\0') {
        return Err("cannot load PTX: it contains a NUL byte".to_owned());
    }
    let dev = device()?;
    guarded("cannot load PTX", || {
        let module = dev.stream.context().load_module(Ptx::from_src(ptx)).map_err(|e| cuda("cannot load PTX", e))?;
        Ok(Arc::new(GpuCode { module, stream: dev.stream.clone(), functions: Mutex::default() }))
    })
}

/// One launch: `function` over `threads` threads, with parameters one device pointer per
/// input, one per output (`outputs` f32 each, zeroed), the scratch pointer (`scratch` f32),
/// then `rows` as an i64.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    pub function: &'a str,
    pub outputs: &'a [usize],
    pub scratch: usize,
    pub rows: usize,
    pub threads: usize,
}

/// `len` f32s in device 0's memory (at least one is allocated, so that no pointer is null),
/// freed when dropped.
#[derive(Debug)]
pub(crate) struct Buffer {
    slice: CudaSlice<f32>,
    pub len: usize,
}

/// Copies `x` into device 0's memory.
pub(crate) fn upload(x: &[f32]) -> Result<Buffer, String> {
    let what = || format!("cannot copy {} f32s to the GPU", x.len());
    check_len(x.len()).map_err(|e| format!("{}: {e}", what()))?;
    let s = &device()?.stream;
    guarded(&what(), || {
        let slice = if x.is_empty() { s.alloc_zeros::<f32>(1) } else { s.clone_htod(x) };
        Ok(Buffer { slice: slice.map_err(|e| cuda(what(), e))?, len: x.len() })
    })
}

/// `len` zeroed f32s in device 0's memory; `what` names them in an error.
fn alloc(what: impl Display, len: usize) -> Result<Buffer, String> {
    check_len(len).map_err(|e| format!("cannot allocate {what}: {e}"))?;
    let s = &device()?.stream;
    guarded(&format!("cannot allocate {what}"), || {
        let slice = s
            .alloc_zeros::<f32>(len.max(1))
            .map_err(|e| cuda(format_args!("cannot allocate {what} ({len} f32s) on the GPU"), e))?;
        Ok(Buffer { slice, len })
    })
}

/// Copies a buffer back to the host.
pub(crate) fn download(b: &Buffer) -> Result<Vec<f32>, String> {
    let s = &device()?.stream;
    guarded("cannot copy a tensor back from the GPU", || {
        let mut v = s.clone_dtoh(&b.slice).map_err(|e| cuda("cannot copy a tensor back from the GPU", e))?;
        s.synchronize().map_err(|e| cuda("cannot copy a tensor back from the GPU", e))?;
        v.truncate(b.len);
        Ok(v)
    })
}

/// Whether `len` f32s fit the address space.
fn check_len(len: usize) -> Result<(), String> {
    match len.checked_mul(size_of::<f32>()) {
        Some(b) if b <= isize::MAX as usize => Ok(()),
        _ => Err(format!("a buffer of {len} f32s is larger than memory can be")),
    }
}

impl GpuCode {
    /// The entry point `name` of this code.
    fn function(&self, name: &str) -> Result<CudaFunction, String> {
        if name.contains('\0') {
            return Err(format!("no kernel {name:?} in the PTX: the name contains a NUL byte"));
        }
        let mut functions = self.functions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        let f = guarded("cannot look the kernel up", || {
            self.module.load_function(name).map_err(|e| cuda(format_args!("no kernel {name} in the PTX"), e))
        })?;
        functions.insert(name.to_owned(), f.clone());
        Ok(f)
    }

    /// Runs one launch on `inputs` (buffers in the device's memory, whose reach the caller
    /// has checked) to completion, and returns its outputs, allocated here to the sizes given;
    /// the scratch is freed on return.
    pub(crate) fn launch(&self, l: &Launch<'_>, inputs: &[&Buffer]) -> Result<Vec<Buffer>, String> {
        let name = l.function;
        let f = self.function(name)?;
        let grid = u32::try_from(l.threads.div_ceil(THREADS_PER_BLOCK))
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or_else(|| format!("kernel {name}: {} threads are more than a launch can have", l.threads))?;
        let rows = i64::try_from(l.rows).map_err(|_| format!("kernel {name}: {} rows do not fit an i64", l.rows))?;
        let mut outs = l
            .outputs
            .iter()
            .enumerate()
            .map(|(k, &len)| alloc(format_args!("kernel {name}'s output {k}"), len))
            .collect::<Result<Vec<_>, _>>()?;
        // An empty view: nothing to launch, its results are zeros.
        if l.threads == 0 {
            return Ok(outs);
        }
        let mut scratch = alloc(format_args!("kernel {name}'s scratch"), l.scratch)?;
        let s = &self.stream;
        guarded(&format!("kernel {name}"), || {
            let mut args = s.launch_builder(&f);
            for x in inputs {
                args.arg(&x.slice);
            }
            for x in &mut outs {
                args.arg(&mut x.slice);
            }
            args.arg(&mut scratch.slice);
            args.arg(&rows);
            let cfg = LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (THREADS_PER_BLOCK as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the parameters are what every generated kernel takes (a global pointer
            // per input, per output and for scratch, then rows), each output and the scratch
            // have the length the kernel's description gives, each input's reach was checked
            // against its buffer by the caller, and all of them outlive the launch (it is
            // synchronized below, before the scratch is freed). Device code checks nothing
            // itself: a kernel reading past its buffers may fault (an error from the
            // synchronization) or read unrelated memory silently, which is why every reach is
            // checked before the launch.
            unsafe { args.launch(cfg) }.map_err(|e| cuda(format_args!("cannot launch kernel {name}"), e))?;
            // Waiting here puts a fault on the node whose kernel made it.
            s.synchronize().map_err(|e| cuda(format_args!("kernel {name} failed"), e))
        })?;
        Ok(outs)
    }
}

/// A driver error as one line: what failed, the error's name and the driver's description.
fn cuda(what: impl Display, e: DriverError) -> String {
    let name = e.error_name().ok().and_then(|s| s.to_str().ok()).map_or_else(|| format!("{:?}", e.0), str::to_owned);
    match e.error_string().ok().and_then(|s| s.to_str().ok()) {
        Some(text) => format!("{what}: {name} ({text})"),
        None => format!("{what}: {name}"),
    }
}

/// Runs `f`, a panic in the bindings becoming an error after `what`.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(String::as_str));
        Err(format!("{what}: the CUDA bindings panicked: {}", why.unwrap_or("no message")))
    })
}
