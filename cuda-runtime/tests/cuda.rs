//! The CUDA run half: errors, never panics, without a driver or device; hand-written PTX
//! kernels on a GPU (skipped, with the reason printed, where there is none).

use graphc_cuda_runtime::{available, load, CudaDevice, GpuCode, GpuInput, GpuLoopKernel, Threads};
use graphc_ir::{parse_module, DType, TensorType};
use graphc_runtime::{
    BufferPool, Device, InterpExecutor, Kernel, KernelTable, Operands, Residency, RunRequest, Session, SessionOptions,
    Tensor,
};
use ndarray::{ArrayD, IxDyn};
use std::sync::Arc;

/// `out0[i] = in0[i] + in1[i]` for `i < rows` (one thread per element of a `[rows, 1]` view).
const ADD_ROWS: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry add_rows(
    .param .u64 add_rows_in0,
    .param .u64 add_rows_in1,
    .param .u64 add_rows_out0,
    .param .u64 add_rows_scratch,
    .param .s64 add_rows_rows
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<14>;

    ld.param.u64 %rd1, [add_rows_in0];
    ld.param.u64 %rd2, [add_rows_in1];
    ld.param.u64 %rd3, [add_rows_out0];
    ld.param.s64 %rd4, [add_rows_rows];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd5, %r1, %r2;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd7, %rd5, %rd6;
    setp.ge.s64 %p1, %rd7, %rd4;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd8, %rd1;
    cvta.to.global.u64 %rd9, %rd2;
    cvta.to.global.u64 %rd10, %rd3;
    shl.b64 %rd11, %rd7, 2;
    add.s64 %rd12, %rd8, %rd11;
    ld.global.f32 %f1, [%rd12];
    add.s64 %rd12, %rd9, %rd11;
    ld.global.f32 %f2, [%rd12];
    add.f32 %f3, %f1, %f2;
    add.s64 %rd13, %rd10, %rd11;
    st.global.f32 [%rd13], %f3;
DONE:
    ret;
}

// `out0[r] = scratch[r] = ((in0[r,0] + in0[r,1]) + in0[r,2]) + in0[r,3]` for `r < rows` (one
// thread per row of a `[rows, 4]` view).
.visible .entry sum_rows(
    .param .u64 sum_rows_in0,
    .param .u64 sum_rows_out0,
    .param .u64 sum_rows_scratch,
    .param .s64 sum_rows_rows
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<6>;
    .reg .b64 %rd<16>;

    ld.param.u64 %rd1, [sum_rows_in0];
    ld.param.u64 %rd2, [sum_rows_out0];
    ld.param.u64 %rd3, [sum_rows_scratch];
    ld.param.s64 %rd4, [sum_rows_rows];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd5, %r1, %r2;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd7, %rd5, %rd6;
    setp.ge.s64 %p1, %rd7, %rd4;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd8, %rd1;
    cvta.to.global.u64 %rd9, %rd2;
    cvta.to.global.u64 %rd10, %rd3;
    shl.b64 %rd11, %rd7, 4;
    add.s64 %rd12, %rd8, %rd11;
    ld.global.f32 %f1, [%rd12];
    ld.global.f32 %f2, [%rd12+4];
    ld.global.f32 %f3, [%rd12+8];
    ld.global.f32 %f4, [%rd12+12];
    add.f32 %f5, %f1, %f2;
    add.f32 %f5, %f5, %f3;
    add.f32 %f5, %f5, %f4;
    shl.b64 %rd13, %rd7, 2;
    add.s64 %rd14, %rd9, %rd13;
    st.global.f32 [%rd14], %f5;
    add.s64 %rd15, %rd10, %rd13;
    st.global.f32 [%rd15], %f5;
DONE:
    ret;
}
"#;

fn f32s(ty: &TensorType, f: impl Fn(usize) -> f32) -> Tensor {
    let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
    let n = shape.iter().product();
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(&shape), (0..n).map(f).collect()).unwrap())
}

fn run(k: &GpuLoopKernel, ts: Vec<Tensor>) -> Result<Vec<Tensor>, String> {
    let pool = BufferPool::default();
    let mut ops = Operands::new(ts.into_iter().map(Arc::new).collect(), &pool);
    Kernel::run(k, &mut ops)
}

fn values(t: &Tensor) -> Vec<f32> {
    let Tensor::F32(a) = t else { panic!("not f32: {}", t.ty()) };
    a.iter().copied().collect()
}

/// The PTX above loaded, or why kernels cannot run here (printed).
fn code() -> Option<Arc<GpuCode>> {
    if let Err(why) = available() {
        eprintln!("skipped: {why}");
        return None;
    }
    Some(load(ADD_ROWS).unwrap_or_else(|e| panic!("the test PTX does not load: {e}")))
}

fn add_rows(code: &Arc<GpuCode>, n: u64, materialize_rhs: bool) -> GpuLoopKernel {
    let ty = TensorType::new(DType::F32, [n]);
    let rhs = if materialize_rhs { TensorType::new(DType::F32, [1]) } else { ty.clone() };
    GpuLoopKernel {
        rows: n as usize,
        cols: 1,
        inputs: vec![
            GpuInput { ty: ty.clone(), materialize: false },
            GpuInput { ty: rhs, materialize: materialize_rhs },
        ],
        out: ty.clone(),
        results: vec![(ty, false)],
        scratch_per_row: 0,
        threads: Threads::PerElement,
        code: code.clone(),
        function: "add_rows".to_owned(),
        reach: vec![n as usize, n as usize],
    }
}

#[test]
fn handles_are_shareable() {
    fn shareable<T: Send + Sync + std::fmt::Debug>() {}
    shareable::<GpuCode>();
    shareable::<GpuLoopKernel>();
}

#[test]
fn errors_without_a_device() {
    // An error or Ok, never a panic or an abort, whatever the machine has.
    match available() {
        Err(why) => {
            assert!(!why.is_empty() && !why.contains('\n'), "{why:?}");
            eprintln!("no CUDA here: {why}");
            let e = load(ADD_ROWS).expect_err("no device, yet PTX loads");
            assert_eq!(e, why);
        }
        Ok(()) => eprintln!("CUDA is available here"),
    }
    let ty = TensorType::new(DType::F32, [3]);
    match (available(), CudaDevice.upload(&f32s(&ty, |i| i as f32))) {
        (Err(why), Err(e)) => assert!(e.contains(&why), "{e}"),
        (Err(why), Ok(_)) => panic!("no device ({why}), yet a tensor was copied to it"),
        (Ok(()), r) => assert!(r.is_ok(), "{r:?}"),
    }
    let e = CudaDevice.upload(&Tensor::I32(ArrayD::zeros(IxDyn(&[3])))).unwrap_err();
    assert!(e.contains("the GPU holds f32 tensors, not i32[3]"), "{e}");
    let e = load("garbage").expect_err("garbage loads as PTX");
    assert!(!e.is_empty() && !e.contains('\n'), "{e:?}");
    eprintln!("load(\"garbage\"): {e}");
    assert!(load("a\0b").is_err());
}

#[test]
fn adds_on_the_device() {
    let Some(code) = code() else { return };
    // Not a multiple of the block: the last block's extra threads must do nothing.
    let n = 1000;
    let k = add_rows(&code, n, false);
    let ty = TensorType::new(DType::F32, [n]);
    let a = f32s(&ty, |i| i as f32 * 0.37 - 100.0);
    let b = f32s(&ty, |i| 1.0 / (i as f32 + 1.0));
    let want: Vec<f32> = values(&a).iter().zip(values(&b)).map(|(x, y)| x + y).collect();
    let out = run(&k, vec![a.clone(), b.clone()]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ty(), ty);
    assert_eq!(values(&out[0]), want);

    // A broadcast materialized before the copy.
    let k = add_rows(&code, n, true);
    let one = TensorType::new(DType::F32, [1]);
    let out = run(&k, vec![a.clone(), f32s(&one, |_| 0.5)]).unwrap();
    let want: Vec<f32> = values(&a).iter().map(|x| x + 0.5).collect();
    assert_eq!(values(&out[0]), want);

    // No threads: nothing launched, empty results.
    let out = run(&add_rows(&code, 0, false), vec![f32s(&TensorType::new(DType::F32, [0]), |_| 0.0); 2]).unwrap();
    assert_eq!(out[0].ty(), TensorType::new(DType::F32, [0]));
}

#[test]
fn refuses_operands_it_was_not_compiled_for() {
    let Some(code) = code() else { return };
    let k = add_rows(&code, 8, false);
    let ty = TensorType::new(DType::F32, [8]);
    let a = f32s(&ty, |i| i as f32);
    let e = run(&k, vec![a.clone(), f32s(&TensorType::new(DType::F32, [9]), |_| 0.0)]).unwrap_err();
    assert!(e.contains("input 1 is f32[9]") && e.contains("compiled for f32[8]"), "{e}");
    let i32s = Tensor::I32(ArrayD::zeros(IxDyn(&[8])));
    let e = run(&k, vec![a.clone(), i32s]).unwrap_err();
    assert!(e.contains("input 1 is i32[8]"), "{e}");
    let e = run(&k, vec![a.clone()]).unwrap_err();
    assert!(e.contains("1 operands where the kernel takes 2"), "{e}");
    let missing = GpuLoopKernel { function: "no_such_kernel".to_owned(), ..add_rows(&code, 8, false) };
    let e = run(&missing, vec![a.clone(), a]).unwrap_err();
    assert!(e.contains("no_such_kernel"), "{e}");
    eprintln!("{e}");
}

#[test]
fn sums_rows_on_the_device() {
    let Some(code) = code() else { return };
    let rows = 300;
    let ty = TensorType::new(DType::F32, [rows, 4]);
    let sum = TensorType::new(DType::F32, [rows, 1]);
    let k = GpuLoopKernel {
        rows: rows as usize,
        cols: 4,
        inputs: vec![GpuInput { ty: ty.clone(), materialize: false }],
        out: ty.clone(),
        results: vec![(sum.clone(), true)],
        scratch_per_row: 1,
        threads: Threads::PerRow,
        code,
        function: "sum_rows".to_owned(),
        reach: vec![rows as usize * 4],
    };
    let a = f32s(&ty, |i| (i as f32).sin() * 10.0);
    let want: Vec<f32> = values(&a).chunks(4).map(|r| ((r[0] + r[1]) + r[2]) + r[3]).collect();
    let out = run(&k, vec![a]).unwrap();
    assert_eq!(out[0].ty(), sum);
    assert_eq!(values(&out[0]), want);
}

#[test]
fn keeps_tensors_on_the_device_between_kernels() {
    let Some(code) = code() else { return };
    let n = 1000;
    let ty = TensorType::new(DType::F32, [n]);
    let k = Arc::new(add_rows(&code, n, false));
    let on_device = k.clone().on_device().expect("a kernel with no broadcast to expand runs on the device");
    assert!(Arc::new(add_rows(&code, n, true)).on_device().is_none(), "a broadcast to expand goes by the host");
    let (a, b) = (f32s(&ty, |i| i as f32 * 0.25), f32s(&ty, |i| 3.0 - i as f32));
    let (da, db) = (CudaDevice.upload(&a).unwrap(), CudaDevice.upload(&b).unwrap());
    let c = on_device.run(&[da.clone(), db.clone()]).unwrap();
    let d = on_device.run(&[c[0].clone(), db.clone()]).unwrap();
    let want: Vec<f32> = values(&a).iter().zip(values(&b)).map(|(x, y)| (x + y) + y).collect();
    assert_eq!(values(&d[0].download().unwrap()), want);
    // A reshape shares the buffer; a view of another size is refused.
    let flat = d[0].reshaped(&TensorType::new(DType::F32, [10, 100])).unwrap();
    assert_eq!(values(&flat.download().unwrap()), want);
    assert!(d[0].reshaped(&TensorType::new(DType::F32, [999])).is_err());
    let e = on_device.run(&[da]).unwrap_err();
    assert!(e.contains("1 operands where the kernel takes 2"), "{e}");
}

#[test]
fn a_session_on_the_gpu_copies_only_feeds_and_fetches() {
    let Some(code) = code() else { return };
    let src = "graph @g(%a: f32[1000], %b: f32[1000]) -> (d: f32[1000]) {\n  %c = add %a, %b : f32[1000]\n  %d = add %c, %b : f32[1000]\n  return %d\n}\n";
    let m = parse_module(src).unwrap();
    let g = &m.graphs[0];
    let table = KernelTable::new();
    for &n in &g.regions[g.body].nodes {
        table.replace("g", n, Arc::new(add_rows(&code, 1000, false)));
    }
    let device = Arc::new(Residency::new(Arc::new(CudaDevice)));
    let executor = Arc::new(InterpExecutor::on_device(Arc::new(table), device));
    let mut s = Session::new(m, SessionOptions::default()).unwrap();
    s.set_executor("g", executor.clone()).unwrap();
    let ty = TensorType::new(DType::F32, [1000]);
    let (a, b) = (f32s(&ty, |i| i as f32), f32s(&ty, |i| 0.5 * i as f32));
    let out = s.run(RunRequest::new("g").feed("a", a.clone()).feed("b", b.clone())).unwrap();
    let want: Vec<f32> = values(&a).iter().zip(values(&b)).map(|(x, y)| (x + y) + y).collect();
    assert_eq!(values(out.tensor(0).unwrap()), want);
    let t = executor.residency().unwrap().transfers();
    assert_eq!((t.uploads, t.downloads), (2, 1), "{t:?}");
}
