//! The interpreter on a device with memory of its own (`InterpExecutor::on_device`), checked
//! with a fake device: its "memory" is host tensors it counts, its kernels the reference
//! kernels, and it runs only f32 nodes of the ops it is given, as a GPU does. Results must
//! equal the plain interpreter's bit for bit, and copies happen only where a value must be on
//! the host: feeds and received values in once, sent and fetched values out.

mod common;
use common::*;
use graphc_ir::{parse_module, Attrs, Module, Node, Op, TensorType, Type};
use graphc_runtime::{
    kernels, CompiledKernels, Device, DeviceKernel, DeviceTensor, ErrorKind, InterpExecutor, Operands, Residency,
    RunRequest, Session, SessionOptions, Tensor, Transfers,
};
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The fake device's memory: what is allocated now, the most ever, and its size.
#[derive(Debug)]
struct Memory {
    live: AtomicU64,
    peak: AtomicU64,
    capacity: u64,
}

impl Memory {
    fn alloc(self: &Arc<Self>, t: Tensor) -> Result<Arc<dyn DeviceTensor>, String> {
        let bytes = (t.len() * 4) as u64;
        let live = self.live.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if live > self.capacity {
            self.live.fetch_sub(bytes, Ordering::SeqCst);
            return Err(format!(
                "out of device memory: {bytes} bytes more than {} free",
                self.capacity - (live - bytes)
            ));
        }
        self.peak.fetch_max(live, Ordering::SeqCst);
        let ty = t.ty();
        Ok(Arc::new(FakeTensor { buffer: Arc::new(Buffer { t, bytes, memory: self.clone() }), ty }))
    }
}

/// An allocation, freed when its last view drops.
#[derive(Debug)]
struct Buffer {
    t: Tensor,
    bytes: u64,
    memory: Arc<Memory>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.memory.live.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct FakeTensor {
    buffer: Arc<Buffer>,
    ty: TensorType,
}

impl FakeTensor {
    /// The elements, shaped as this view's type.
    fn host(&self) -> Tensor {
        kernels::eval(Op::Reshape, &Attrs::default(), &[&self.buffer.t], std::slice::from_ref(&self.ty))
            .expect("a view's type has its buffer's elements")
            .remove(0)
    }
}

impl DeviceTensor for FakeTensor {
    fn ty(&self) -> TensorType {
        self.ty.clone()
    }
    fn download(&self) -> Result<Tensor, String> {
        Ok(self.host())
    }
    fn reshaped(&self, ty: &TensorType) -> Result<Arc<dyn DeviceTensor>, String> {
        Ok(Arc::new(FakeTensor { buffer: self.buffer.clone(), ty: ty.clone() }))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug)]
struct FakeDevice {
    memory: Arc<Memory>,
}

impl Device for FakeDevice {
    fn name(&self) -> String {
        "fake device".into()
    }
    fn upload(&self, t: &Tensor) -> Result<Arc<dyn DeviceTensor>, String> {
        match t {
            Tensor::F32(_) => self.memory.alloc(t.clone()),
            _ => Err(format!("the fake device holds f32 tensors only, not {}", t.ty())),
        }
    }
}

/// One node's kernel on the fake device: the reference kernel on the buffers' elements.
#[derive(Debug)]
struct FakeKernel {
    op: Op,
    attrs: Attrs,
    results: Vec<TensorType>,
    memory: Arc<Memory>,
}

impl DeviceKernel for FakeKernel {
    fn run(&self, operands: &[Arc<dyn DeviceTensor>]) -> Result<Vec<Arc<dyn DeviceTensor>>, String> {
        let host = operands
            .iter()
            .map(|d| {
                d.as_any().downcast_ref::<FakeTensor>().map(FakeTensor::host).ok_or("not the fake device's tensor")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Tensor> = host.iter().collect();
        let out = kernels::eval(self.op, &self.attrs, &refs, &self.results).map_err(|e| e.0)?;
        out.into_iter().map(|t| self.memory.alloc(t)).collect()
    }
}

/// Device kernels for the f32 nodes of the given ops; no host kernels (the interpreter's).
#[derive(Debug)]
struct FakeKernels {
    kernels: HashMap<(String, Node), Arc<FakeKernel>>,
}

impl FakeKernels {
    fn new(m: &Module, ops: &[Op], memory: &Arc<Memory>) -> Self {
        let f32_only = |ty: &Type| matches!(ty, Type::Tensor(t) if t.dtype == graphc_ir::DType::F32);
        let mut kernels = HashMap::new();
        for g in &m.graphs {
            for (n, nd) in g.nodes.iter() {
                let types = nd.operands.iter().chain(&nd.results).map(|&v| &g.values[v].ty);
                if ops.contains(&nd.op) && types.clone().all(f32_only) {
                    let results = nd.results.iter().filter_map(|&v| g.values[v].ty.as_tensor().cloned()).collect();
                    let k = FakeKernel { op: nd.op, attrs: nd.attrs.clone(), results, memory: memory.clone() };
                    kernels.insert((g.name.clone(), n), Arc::new(k));
                }
            }
        }
        FakeKernels { kernels }
    }
}

impl CompiledKernels for FakeKernels {
    fn run(&self, _: &str, _: Node, _: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>> {
        None
    }
    fn device_kernel(&self, graph: &str, node: Node) -> Option<Arc<dyn DeviceKernel>> {
        self.kernels.get(&(graph.to_string(), node)).map(|k| k.clone() as Arc<dyn DeviceKernel>)
    }
}

const OPS: &[Op] = &[Op::Add, Op::Sub, Op::Mul, Op::Relu, Op::Tanh, Op::MatMul, Op::ReduceSum];

/// A module run two ways: on the fake device for the graphs in `on_device`, and on the plain
/// interpreter.
struct Pair {
    device: Session,
    reference: Session,
    executor: Arc<InterpExecutor>,
    memory: Arc<Memory>,
}

fn pair(src: &str, on_device: &[&str], capacity: u64) -> Pair {
    let m = parse_module(src).unwrap_or_else(|d| panic!("{src}\n{d:?}"));
    let memory = Arc::new(Memory { live: AtomicU64::new(0), peak: AtomicU64::new(0), capacity });
    let kernels = Arc::new(FakeKernels::new(&m, OPS, &memory));
    let device = Arc::new(Residency::new(Arc::new(FakeDevice { memory: memory.clone() })));
    let executor = Arc::new(InterpExecutor::on_device(kernels, device));
    let mut device = Session::new(m.clone(), SessionOptions::default()).unwrap();
    for g in on_device {
        device.set_executor(g, executor.clone()).unwrap();
    }
    let reference = Session::new(m, SessionOptions::default()).unwrap();
    Pair { device, reference, executor, memory }
}

impl Pair {
    fn transfers(&self) -> Transfers {
        self.executor.residency().unwrap().transfers()
    }

    /// Runs a step both ways and checks that the fetches are equal bit for bit; returns the
    /// device's.
    fn step(&self, requests: impl Fn() -> Vec<RunRequest>) -> Vec<Vec<Tensor>> {
        let tensors = |outs: Vec<graphc_runtime::RunOutput>| -> Vec<Vec<Tensor>> {
            outs.iter().map(|o| (0..o.values.len()).filter_map(|i| o.tensor(i).cloned()).collect()).collect()
        };
        let got = tensors(self.device.run_step(requests()).unwrap_or_else(|e| panic!("on the device: {e}")));
        let want = tensors(self.reference.run_step(requests()).unwrap());
        let counts = |o: &[Vec<Tensor>]| o.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(counts(&got), counts(&want));
        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
            assert_eq!(g.ty(), w.ty());
            let bits = |t: &Tensor| t.to_f64_vec().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(g), bits(w), "device {g:?} vs interpreter {w:?}");
        }
        got
    }
}

fn ramp(shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    f32t(shape, &(0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * scale).collect::<Vec<_>>())
}

const CHAIN: &str = "
graph @g(%x: f32[64,64], %w: f32[64,64]) -> (y: f32[64,64], s: f32[64]) {
  %a = matmul %x, %w : f32[64,64]
  %b = relu %a : f32[64,64]
  %c = add %b, %x : f32[64,64]
  %d = mul %c, %c : f32[64,64]
  %e = tanh %d : f32[64,64]
  %f = sub %e, %b : f32[64,64]
  %s = reduce_sum %f {axes = [0]} : f32[64]
  return %f, %s
}
";

#[test]
fn a_chain_of_device_kernels_copies_its_feeds_in_once_and_its_fetches_out() {
    let p = pair(CHAIN, &["g"], 1 << 30);
    let (x, w) = (ramp(&[64, 64], 0.01), ramp(&[64, 64], 0.003));
    p.step(|| vec![RunRequest::new("g").feed("x", x.clone()).feed("w", w.clone())]);
    let t = p.transfers();
    // %x is read by two nodes but copied once; nothing comes back but the two fetches.
    assert_eq!((t.uploads, t.upload_bytes), (2, 2 * 64 * 64 * 4));
    assert_eq!((t.downloads, t.download_bytes), (2, (64 * 64 + 64) * 4));
    assert_eq!(p.memory.live.load(Ordering::SeqCst), 0, "the step's device tensors are freed when it ends");
}

#[test]
fn device_tensors_are_freed_after_their_last_use() {
    // Ten 1 MiB values in a row: each dies once the next is made, and the fed one once the
    // first is, so at most an operand and a result are on the device at once.
    let mut body = String::from("  %v0 = relu %x : f32[512,512]\n");
    for i in 1..10 {
        body += &format!("  %v{i} = add %v{}, %v{} : f32[512,512]\n", i - 1, i - 1);
    }
    let src = format!("graph @g(%x: f32[512,512]) -> (y: f32[512,512]) {{\n{body}  return %v9\n}}\n");
    let p = pair(&src, &["g"], 1 << 30);
    let x = ramp(&[512, 512], 0.5);
    p.step(|| vec![RunRequest::new("g").feed("x", x.clone())]);
    let mib = 512 * 512 * 4;
    let peak = p.memory.peak.load(Ordering::SeqCst);
    assert!(peak <= 2 * mib, "peak {peak} bytes for 1 MiB values");
}

#[test]
fn a_device_partition_copies_only_at_its_recv_and_send() {
    let src = "
graph @host(%x: f32[8,16], %w: f32[16,4]) -> (sent: token, y: f32[8,4]) {
  %h = matmul %x, %w device \"/device:cpu:0\" : f32[8,4]
  %s = send %h {key = \"h\", to = \"/device:gpu:0\"} device \"/device:cpu:0\" : token
  %back = recv {key = \"r\", from = \"/device:gpu:0\"} device \"/device:cpu:0\" : f32[8,4]
  %y = add %h, %back device \"/device:cpu:0\" : f32[8,4]
  return %s, %y
}
graph @gpu() -> (sent: token, sh: i64[1]) {
  %h = recv {key = \"h\", from = \"/device:cpu:0\"} device \"/device:gpu:0\" : f32[8,4]
  %r = relu %h device \"/device:gpu:0\" : f32[8,4]
  %t = tanh %r device \"/device:gpu:0\" : f32[8,4]
  %m = mul %t, %h device \"/device:gpu:0\" : f32[8,4]
  %flat = reshape %m {shape = [32]} device \"/device:gpu:0\" : f32[32]
  %n = identity %flat device \"/device:gpu:0\" : f32[32]
  %sh = shape %n device \"/device:gpu:0\" : i64[1]
  %back = reshape %n {shape = [8, 4]} device \"/device:gpu:0\" : f32[8,4]
  %o = relu %back device \"/device:gpu:0\" : f32[8,4]
  %s = send %o {key = \"r\", to = \"/device:cpu:0\"} device \"/device:gpu:0\" : token
  return %s, %sh
}
";
    let p = pair(src, &["gpu"], 1 << 30);
    let (x, w) = (ramp(&[8, 16], 0.1), ramp(&[16, 4], 0.05));
    let requests = || vec![RunRequest::new("host").feed("x", x.clone()).feed("w", w.clone()), RunRequest::new("gpu")];
    for _ in 0..3 {
        p.step(requests);
    }
    // Per step: the received tensor in, the sent one out; the reshapes, the identity and the
    // shape read no elements.
    let t = p.transfers();
    assert_eq!((t.uploads, t.downloads), (3, 3));
    assert_eq!((t.upload_bytes, t.download_bytes), (3 * 32 * 4, 3 * 32 * 4));
}

#[test]
fn a_loop_keeps_its_carried_tensors_on_the_device() {
    let src = "
graph @g(%x: f32[16,16], %w: f32[16,16], %n: i32[]) -> (y: f32[16,16], i: i32[]) {
  %i0 = constant {value = dense<0> : i32[]} : i32[]
  %x1 = relu %x : f32[16,16]
  %i, %y, %ws, %ns = while %i0, %x1, %w, %n : i32[], f32[16,16], f32[16,16], i32[]
    cond(%ci: i32[], %cy: f32[16,16], %cw: f32[16,16], %cn: i32[]) {
      %more = less %ci, %cn : bool[]
      yield %more
    }
    body(%bi: i32[], %by: f32[16,16], %bw: f32[16,16], %bn: i32[]) {
      %one = constant {value = dense<1> : i32[]} : i32[]
      %next = add %bi, %one : i32[]
      %p = matmul %by, %bw : f32[16,16]
      %t = tanh %p : f32[16,16]
      yield %next, %t, %bw, %bn
    }
  return %y, %i
}
";
    let p = pair(src, &["g"], 1 << 30);
    let (x, w) = (ramp(&[16, 16], 0.02), ramp(&[16, 16], 0.01));
    let mut seen = Vec::new();
    for n in [1, 5, 40] {
        let before = p.transfers();
        p.step(|| vec![RunRequest::new("g").feed("x", x.clone()).feed("w", w.clone()).feed("n", i32t(&[], &[n]))]);
        let t = p.transfers();
        seen.push((t.uploads - before.uploads, t.downloads - before.downloads));
    }
    // %x and %w in, %y out, whatever the iteration count (the i32 counter stays on the host).
    assert_eq!(seen, vec![(2, 1); 3]);
}

#[test]
fn a_cond_passes_device_tensors_into_its_branches() {
    let src = "
graph @g(%x: f32[8,8], %p: bool[]) -> (y: f32[8,8]) {
  %a = relu %x : f32[8,8]
  %y = cond %p, %a, %x : f32[8,8]
    then(%ta: f32[8,8], %tx: f32[8,8]) {
      %m = matmul %ta, %tx : f32[8,8]
      yield %m
    }
    else(%ea: f32[8,8], %ex: f32[8,8]) {
      %t = tanh %ea : f32[8,8]
      yield %t
    }
  return %y
}
";
    let p = pair(src, &["g"], 1 << 30);
    let x = ramp(&[8, 8], 0.1);
    for (i, branch) in [true, false].into_iter().enumerate() {
        p.step(|| vec![RunRequest::new("g").feed("x", x.clone()).feed("p", boolt(&[], &[branch]))]);
        // %x in and %y out: %a goes into the branch on the device, and the predicate is a
        // host value.
        let t = p.transfers();
        assert_eq!((t.uploads, t.downloads), (i as u64 + 1, i as u64 + 1), "branch {branch}");
    }
}

#[test]
fn a_variables_value_is_copied_once_until_it_is_assigned() {
    let src = "
graph @g(%x: f32[4,8]) -> (y: f32[4,2]) {
  %v = variable {name = \"w\", init = dense<0.25> : f32[8,2]} : var<f32[8,2]>
  %w = read %v : f32[8,2]
  %y = matmul %x, %w : f32[4,2]
  return %y
}
graph @g2(%x: f32[4,8]) -> (y: f32[4,2]) {
  %v = variable {name = \"w\", init = dense<0.25> : f32[8,2]} : var<f32[8,2]>
  %w = read %v : f32[8,2]
  %y = matmul %x, %w : f32[4,2]
  %z = tanh %y : f32[4,2]
  return %z
}
graph @set(%nw: f32[8,2]) -> (w: f32[8,2]) {
  %v = variable {name = \"w\", init = dense<0.25> : f32[8,2]} : var<f32[8,2]>
  %a = assign %v, %nw : f32[8,2]
  return %a
}
";
    let p = pair(src, &["g", "g2"], 1 << 30);
    let x = ramp(&[4, 8], 0.1);
    let uploads = |p: &Pair| p.transfers().uploads;
    let step = || vec![RunRequest::new("g").feed("x", x.clone())];
    p.step(step);
    assert_eq!(uploads(&p), 2, "the feed and the weights");
    p.step(step);
    p.step(step);
    assert_eq!(uploads(&p), 4, "a new feed each step; the weights are on the device already");
    p.step(|| vec![RunRequest::new("g2").feed("x", x.clone())]);
    assert_eq!(uploads(&p), 5, "another graph on the device finds the weights there too");
    let nw = ramp(&[8, 2], 0.3);
    p.step(|| vec![RunRequest::new("set").feed("nw", nw.clone())]);
    let y = p.step(step);
    assert_eq!(uploads(&p), 7, "the assigned weights are copied in");
    assert_ne!(y[0][0].to_f64_vec(), vec![0.0; 8]);
}

#[test]
fn host_ops_copy_out_what_they_read_and_their_results_go_back_in() {
    // A cast and an f64 add have no device kernel here: they read a device value on the
    // host, and the product after them copies their result in.
    let src = "
graph @g(%x: f32[4,4]) -> (y: f32[4,4], z: f64[4,4]) {
  %a = relu %x : f32[4,4]
  %b = cast %a {to = f64} : f64[4,4]
  %z = add %b, %b : f64[4,4]
  %c = cast %z {to = f32} : f32[4,4]
  %y = matmul %c, %a : f32[4,4]
  return %y, %z
}
";
    let p = pair(src, &["g"], 1 << 30);
    let x = ramp(&[4, 4], 0.5);
    p.step(|| vec![RunRequest::new("g").feed("x", x.clone())]);
    let t = p.transfers();
    // In: %x and %c. Out: %a for the cast, and %y; %z is a host value already.
    assert_eq!((t.uploads, t.downloads), (2, 2));
}

#[test]
fn a_full_device_is_an_error_at_the_node_and_the_session_goes_on() {
    // Room for the two feeds, not for their product too.
    let src = format!(
        "{CHAIN}\ngraph @small(%x: f32[64,64]) -> (y: f32[64,64]) {{\n  %y = relu %x : f32[64,64]\n  return %y\n}}\n"
    );
    let p = pair(&src, &["g", "small"], 2 * 64 * 64 * 4);
    let (x, w) = (ramp(&[64, 64], 0.01), ramp(&[64, 64], 0.003));
    let e = p.device.run(RunRequest::new("g").feed("x", x.clone()).feed("w", w.clone())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert!(e.message.contains("out of device memory"), "{e}");
    assert!(e.to_string().contains("@g") && e.to_string().contains("%"), "located at a node: {e}");
    assert_eq!(p.memory.live.load(Ordering::SeqCst), 0, "a failed step frees what it held on the device");
    // The session goes on: a step that fits runs, equal to the interpreter.
    p.step(|| vec![RunRequest::new("small").feed("x", x.clone())]);
    assert_eq!(p.memory.live.load(Ordering::SeqCst), 0);
}

#[test]
fn a_dtype_the_device_cannot_hold_is_an_error_naming_it() {
    // A kernel claiming an i32 node: the device refuses the operand, and the error says so.
    let src = "graph @g(%x: i32[3]) -> (y: i32[3]) {\n  %y = add %x, %x : i32[3]\n  return %y\n}\n";
    let m = parse_module(src).unwrap();
    let memory = Arc::new(Memory { live: AtomicU64::new(0), peak: AtomicU64::new(0), capacity: 1 << 20 });
    let g = &m.graphs[0];
    let n = g.regions[g.body].nodes[0];
    let k = FakeKernel { op: Op::Add, attrs: Attrs::default(), results: vec![], memory: memory.clone() };
    let kernels = FakeKernels { kernels: HashMap::from([(("g".to_string(), n), Arc::new(k))]) };
    let executor =
        InterpExecutor::on_device(Arc::new(kernels), Arc::new(Residency::new(Arc::new(FakeDevice { memory }))));
    let mut s = Session::new(m, SessionOptions::default()).unwrap();
    s.set_executor("g", Arc::new(executor)).unwrap();
    let e = s.run(RunRequest::new("g").feed("x", i32t(&[3], &[1, 2, 3]))).unwrap_err();
    assert!(e.message.contains("operand 0 to fake device: the fake device holds f32 tensors only, not i32[3]"), "{e}");
}

#[test]
fn random_chains_on_the_device_equal_the_interpreter() {
    // Every chain of up to six ops over two fed values, each op reading two earlier values
    // (some devices, some host casts between), on a few shapes.
    let shapes: &[&[usize]] = &[&[1], &[3, 5], &[2, 3, 4]];
    let ops = ["add", "sub", "mul", "castpair"];
    let mut seen = HashSet::new();
    for (si, shape) in shapes.iter().enumerate() {
        let ty = format!("f32[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","));
        for seed in 0..40usize {
            let mut body = String::new();
            let mut values = vec!["%x".to_string(), "%z".to_string()];
            let mut r = seed * 7919 + si * 104729 + 1;
            let mut next = |k: usize| {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) % (1 << 31);
                r % k
            };
            for i in 0..6 {
                let (a, b) = (values[next(values.len())].clone(), values[next(values.len())].clone());
                match ops[next(ops.len())] {
                    "castpair" => {
                        body += &format!("  %h{i} = cast {a} {{to = f64}} : {}\n", ty.replace("f32", "f64"));
                        body += &format!("  %v{i} = cast %h{i} {{to = f32}} : {ty}\n");
                    }
                    op => body += &format!("  %v{i} = {op} {a}, {b} : {ty}\n"),
                }
                body += &format!("  %t{i} = tanh %v{i} : {ty}\n");
                values.push(format!("%t{i}"));
            }
            let last = values.last().unwrap();
            let src = format!("graph @g(%x: {ty}, %z: {ty}) -> (y: {ty}) {{\n{body}  return {last}\n}}\n");
            seen.insert(src.clone());
            let p = pair(&src, &["g"], 1 << 30);
            let (x, z) = (ramp(shape, 0.3), ramp(shape, -0.2));
            p.step(|| vec![RunRequest::new("g").feed("x", x.clone()).feed("z", z.clone())]);
            assert_eq!(p.memory.live.load(Ordering::SeqCst), 0);
        }
    }
    assert!(seen.len() > 100, "{} distinct graphs", seen.len());
}
