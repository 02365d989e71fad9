//! The reference interpreter: runs a region's nodes one at a time in their order (which the
//! verifier guarantees is a topological order), pure ops through the reference kernels (or a
//! backend's compiled code), state and control flow here. [`InterpExecutor`] is its face as an
//! [`Executor`], every session's default.
//!
//! On a device with memory of its own ([`InterpExecutor::on_device`]), the nodes the device
//! has kernels for run there on tensors that stay there ([`RtValue::Device`]): a host operand
//! is copied in (a variable's value or a constant once while it lives, [`Residency`]), and
//! its value bound to the copy from then on (freed at its last use), and a device value is
//! copied out only for what runs on the host: a send, a fetch, an op the device has no
//! kernel for. Identity, reshape, shape and rank take device values as they are, and
//! control flow passes them into its regions.

use crate::budget::{bytes_of, Ledger};
use crate::compiled::{CompiledKernels, Operands};
use crate::constants::ConstantCache;
use crate::device::{DeviceKernel, DeviceTensor, Residency};
use crate::error::{ErrorKind, RunError};
use crate::executor::{ExecContext, ExecOutput, Executor, NodeEvent, Ran};
use crate::frames::{Frame, Layout};
use crate::kernels;
use crate::limits::check_tensor_size;
use crate::optimizer;
use crate::pool::BufferPool;
use crate::rendezvous::{rendezvous_key, Rendezvous};
use crate::state::{Queue, State, Variable};
use crate::tensor::Tensor;
use crate::value::RtValue;
use crate::wait::WaitCtx;
use graphc_ir::{Graph, Node, Op, Region, TensorType, Value};
use std::sync::Arc;
use std::time::Instant;

/// The reference interpreter as an executor, running the nodes `compiled` has code for
/// through it and the rest through the reference kernels.
#[derive(Clone, Debug, Default)]
pub struct InterpExecutor {
    compiled: Option<Arc<dyn CompiledKernels>>,
    /// The device whose kernels (`compiled`'s device kernels) run on tensors in its memory.
    residency: Option<Arc<Residency>>,
}

impl InterpExecutor {
    /// The interpreter on the reference kernels alone.
    pub fn new() -> Self {
        InterpExecutor::default()
    }

    /// The interpreter running a backend's compiled code where it has some.
    pub fn with_compiled(compiled: Arc<dyn CompiledKernels>) -> Self {
        InterpExecutor { compiled: Some(compiled), residency: None }
    }

    /// The interpreter keeping tensors in `device`'s memory between the nodes `compiled` has
    /// device kernels for ([`CompiledKernels::device_kernel`]), and running the rest as
    /// [`InterpExecutor::with_compiled`] does. Executors of one device share its residency,
    /// so that weights two graphs read are copied once.
    pub fn on_device(compiled: Arc<dyn CompiledKernels>, device: Arc<Residency>) -> Self {
        InterpExecutor { compiled: Some(compiled), residency: Some(device) }
    }

    pub fn compiled(&self) -> Option<&Arc<dyn CompiledKernels>> {
        self.compiled.as_ref()
    }

    /// The device it keeps tensors on, with what crossed so far.
    pub fn residency(&self) -> Option<&Arc<Residency>> {
        self.residency.as_ref()
    }
}

impl Executor for InterpExecutor {
    fn run(&self, mut cx: ExecContext<'_>) -> Result<ExecOutput, RunError> {
        let graph = cx.graph();
        let mut interp = Interp::new(&cx);
        interp.events = cx.trace().map(|_| Vec::new());
        interp.max_events = cx.trace().unwrap_or(crate::executor::MAX_EVENTS);
        interp.compiled = self.compiled.as_deref();
        interp.residency = self.residency.as_deref();
        interp.retained = cx.fetches().iter().map(|&v| interp.layout.slot(v)).collect();
        interp.derived_from_cache =
            cx.feeds().keys().all(|&v| matches!(graph.values[v].def, graphc_ir::ValueDef::Param(..)));
        let mut env = interp.layout.frame(graph.body);
        for (v, t) in cx.take_feeds() {
            interp.bind(&mut env, v, RtValue::Tensor(t));
        }
        let ran = interp.run_nodes(graph.body, &mut env, &|n| cx.is_needed(n));
        let values = ran.and_then(|()| {
            cx.fetches()
                .iter()
                .map(|&v| {
                    let value = env.get(interp.layout.slot(v)).cloned();
                    interp.on_host(
                        value.ok_or_else(|| RunError::internal(format!("fetched value {v} was not computed")))?,
                    )
                })
                .collect::<Result<Vec<_>, _>>()
        });
        drop(env);
        if let Some(r) = &self.residency {
            r.forget_dead();
        }
        let values = values?;
        Ok(ExecOutput {
            values,
            nodes_executed: interp.executed,
            events: interp.events.take().unwrap_or_default(),
            events_dropped: interp.events_dropped,
        })
    }
}

/// A device kernel's results, and the host operands it copied in, by value.
type RunOnDevice = (Vec<RtValue>, Vec<(Value, Arc<dyn DeviceTensor>)>);

/// One graph's execution within a step.
#[derive(Debug)]
pub(crate) struct Interp<'a> {
    pub graph: &'a Graph,
    pub state: &'a State,
    pub rendezvous: &'a dyn Rendezvous,
    pub wait: WaitCtx<'a>,
    /// Node executions so far, nested ones and loop iterations included.
    pub executed: usize,
    /// Iteration numbers of the enclosing while loops, outermost first.
    iterations: Vec<u64>,
    /// The enclosing while nodes, outermost first: a step stopped at its deadline blames the
    /// innermost, the likeliest never to end.
    loops: Vec<Node>,
    /// The largest tensor a kernel may produce, in bytes.
    max_bytes: u64,
    /// Node executions, when tracing (at most `max_events`).
    pub events: Option<Vec<NodeEvent>>,
    pub max_events: usize,
    /// Node executions past `max_events`, not recorded.
    pub events_dropped: u64,
    /// How many regions enclose the nodes running now.
    depth: usize,
    /// What ran the last node to finish (its tier asked only when tracing).
    ran: Ran,
    /// Compiled code for some nodes, from a backend.
    pub compiled: Option<&'a dyn CompiledKernels>,
    /// The device that runs `compiled`'s device kernels, keeping their tensors.
    pub residency: Option<&'a Residency>,
    /// Every value's slot in its region's frame, and what each node frees there.
    pub layout: &'a Layout,
    /// Slots of the body kept whatever their liveness (the fetches, read after the body has
    /// run).
    pub retained: Vec<usize>,
    /// Where dead values' buffers go, and compiled kernels' outputs come from.
    pub pool: &'a BufferPool,
    /// The tensors this run holds, counted against the session's memory budget.
    ledger: Ledger,
    /// The session's step-invariant values, and which nodes of this graph give them.
    constants: &'a ConstantCache,
    invariant: Arc<rustc_hash::FxHashSet<Node>>,
    /// Whether values derived from constants may come from the cache: not when a feed
    /// replaces a value of the body (what depends on it differs from the kept value).
    derived_from_cache: bool,
}

impl<'a> Interp<'a> {
    pub fn new(cx: &ExecContext<'a>) -> Self {
        Interp {
            graph: cx.graph(),
            state: cx.state(),
            rendezvous: cx.rendezvous(),
            wait: cx.wait().clone(),
            executed: 0,
            iterations: Vec::new(),
            loops: Vec::new(),
            max_bytes: cx.max_tensor_bytes(),
            events: None,
            max_events: crate::executor::MAX_EVENTS,
            events_dropped: 0,
            depth: 0,
            ran: Ran::Reference,
            compiled: None,
            residency: None,
            layout: cx.layout(),
            retained: Vec::new(),
            pool: cx.pool(),
            ledger: Ledger::new(cx.budget().clone()),
            constants: cx.constants(),
            invariant: cx.constants().nodes(cx.graph()),
            derived_from_cache: true,
        }
    }

    /// Binds `v` to `r` unless it is bound already (a fed value keeps its feed), counting the
    /// tensor against the budget.
    fn bind(&mut self, env: &mut Frame, v: Value, r: RtValue) {
        let slot = self.layout.slot(v);
        if env.contains(slot) {
            return;
        }
        if let RtValue::Tensor(t) = &r {
            self.ledger.hold(t, v);
        }
        env.set(slot, r);
    }

    /// Unbinds the value in `slot`, uncounting its tensor; returns the value.
    fn unbind(&mut self, env: &mut Frame, slot: usize) -> Option<RtValue> {
        let r = env.take(slot);
        if let Some(RtValue::Tensor(t)) = &r {
            self.ledger.release(t);
        }
        r
    }

    /// Runs, in order, the nodes of `region` that `keep` admits. A result already bound in
    /// `env` (a fed value) keeps its fed value.
    pub fn run_nodes(&mut self, region: Region, env: &mut Frame, keep: &dyn Fn(Node) -> bool) -> Result<(), RunError> {
        for &n in &self.graph.regions[region].nodes {
            if keep(n) {
                self.check_stop()?;
                let nd = &self.graph.nodes[n];
                let start = self.events.is_some().then(Instant::now);
                let results =
                    self.exec_node(n, env).map_err(|e| e.at_node(&self.graph.name, self.describe(n), nd.span))?;
                if let Some(start) = start {
                    let end = Instant::now();
                    let key = matches!(nd.op, Op::Send | Op::Recv)
                        .then(|| self.rendezvous_key(nd.attrs.str("key").unwrap_or_default()));
                    let depth = self.depth;
                    let ran = match self.ran {
                        Ran::Compiled(_) => Ran::Compiled(self.tier(n)),
                        Ran::Device(_) => Ran::Device(self.tier(n)),
                        r => r,
                    };
                    match &mut self.events {
                        Some(events) if events.len() < self.max_events => {
                            events.push(NodeEvent { node: n, start, end, key, depth, ran })
                        }
                        _ => self.events_dropped += 1,
                    }
                }
                for (&v, r) in nd.results.iter().zip(results) {
                    self.bind(env, v, r);
                }
                // Results nothing reads (operands read last left `env` before the node ran).
                for &slot in self.layout.node(n).dead.iter() {
                    if !self.is_retained(slot) {
                        let r = self.unbind(env, slot as usize);
                        self.release(r);
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs a whole region on `args` and returns what it yields.
    fn run_region(&mut self, region: Region, args: Vec<RtValue>) -> Result<Vec<RtValue>, RunError> {
        let rd = &self.graph.regions[region];
        let mut env = self.layout.frame(region);
        for (&p, a) in rd.params.iter().zip(args) {
            self.bind(&mut env, p, a);
        }
        self.depth += 1;
        let ran = self.run_nodes(region, &mut env, &|_| true);
        self.depth -= 1;
        let out = ran.and_then(|()| rd.yields.iter().map(|&v| self.lookup(&env, v)).collect());
        for slot in env.bound().collect::<Vec<_>>() {
            self.unbind(&mut env, slot);
        }
        out
    }

    /// [`WaitCtx::check_stop`], with a deadline inside a loop located at the loop.
    fn check_stop(&self) -> Result<(), RunError> {
        self.wait.check_stop().map_err(|e| match (self.loops.last(), self.iterations.last()) {
            (Some(&n), Some(i)) if e.kind == ErrorKind::Timeout => {
                let message = format!("{}, in iteration {} of this loop", e.message, i + 1);
                RunError { message, ..e }.at_node(&self.graph.name, self.describe(n), self.graph.nodes[n].span)
            }
            _ => e,
        })
    }

    fn describe(&self, n: Node) -> String {
        format!("node {}", self.graph.describe(n))
    }

    /// The tier of node `n`'s compiled kernel, as the backend names it.
    fn tier(&self, n: Node) -> Option<&'static str> {
        self.compiled?.tier(&self.graph.name, n)
    }

    /// Whether the value in `slot` of the frame running now is kept for the caller whatever
    /// its liveness (a fetch: only the body's frame has those).
    fn is_retained(&self, slot: u32) -> bool {
        self.depth == 0 && self.retained.contains(&(slot as usize))
    }

    /// The value bound to `v` in `env`, the frame of its region.
    fn lookup(&self, env: &Frame, v: Value) -> Result<RtValue, RunError> {
        env.get(self.layout.slot(v)).cloned().ok_or_else(|| unbound(v))
    }

    /// Drops a dead value; a tensor's buffer goes to the pool when nothing else holds it and
    /// compiled kernels may want it.
    fn release(&self, v: Option<RtValue>) {
        if let (Some(RtValue::Tensor(t)), Some(_)) = (v, self.compiled) {
            self.pool.give(t);
        }
    }

    fn exec_node(&mut self, n: Node, env: &mut Frame) -> Result<Vec<RtValue>, RunError> {
        let g = self.graph;
        let nd = &g.nodes[n];
        let slots = self.layout.node(n);
        let args = (slots.operands.iter().zip(&nd.operands))
            .map(|(&s, v)| env.get(s as usize).cloned().ok_or_else(|| unbound(*v)))
            .collect::<Result<Vec<_>, _>>()?;
        let cached = self.invariant.contains(&n) && (self.derived_from_cache || nd.op == Op::Constant);
        let on_device = if cached { None } else { self.device_kernel(n) };
        // Kernels allocate their results: those must fit the budget beside what is live,
        // operands read here for the last time included (they live until the kernel is done).
        // A device's results are in its memory, which the device itself refuses to overfill,
        // as are a view's of a device value.
        let as_is = matches!(args.first(), Some(RtValue::Device(_))) && takes_device_values_as_they_are(nd.op);
        if (nd.op == Op::Fusion || kernels::is_kernel(nd.op)) && !as_is {
            let mut bytes = 0u64;
            for t in nd.results.iter().filter_map(|&v| g.values[v].ty.as_tensor()) {
                check_tensor_size(t, self.max_bytes).map_err(|m| RunError::new(ErrorKind::ResourceExhausted, m))?;
                bytes = bytes.saturating_add(crate::limits::tensor_bytes(t).unwrap_or(u64::MAX));
            }
            if on_device.is_none() {
                self.ledger.check(bytes, g)?;
            }
        }
        // Operands read here for the last time leave `env` now, so that the node holds the
        // only reference and a kernel may reuse their buffers.
        for &slot in slots.dead.iter() {
            if !self.is_retained(slot) {
                self.unbind(env, slot as usize);
            }
        }
        self.executed += 1;
        let results = match on_device {
            Some(k) => {
                let (results, copied) = self.run_on_device(n, &*k, args)?;
                self.ran = Ran::Device(None);
                // Operands copied in are bound to their copies from now on (those still
                // read later), so that no later kernel, loop iteration or branch copies them
                // again, and the host's hold on them ends.
                for (v, d) in copied {
                    if env.contains(self.layout.slot(v)) {
                        self.unbind(env, self.layout.slot(v));
                        self.bind(env, v, RtValue::Device(d));
                    }
                }
                results
            }
            None if cached => self.compute_invariant(n, args)?,
            None => self.compute(n, args)?,
        };
        if results.len() != nd.results.len() {
            return Err(RunError::internal(format!(
                "gave {} results, the node has {}",
                results.len(),
                nd.results.len()
            )));
        }
        for (r, &v) in results.iter().zip(&nd.results) {
            let want = &g.values[v].ty;
            if !r.is_of(want) {
                return Err(RunError::internal(format!("produced {} where the type rule says {want}", r.ty())));
            }
        }
        Ok(results)
    }

    /// The results of a step-invariant node: kept from an earlier step, or computed and kept.
    fn compute_invariant(&mut self, n: Node, args: Vec<RtValue>) -> Result<Vec<RtValue>, RunError> {
        let g = self.graph;
        if let Some(kept) = self.constants.get(&g.name, n) {
            self.ran = Ran::Kept;
            return Ok(kept.into_iter().map(RtValue::Tensor).collect());
        }
        let results = self.compute(n, args)?;
        let tensors: Option<Vec<Arc<Tensor>>> = results
            .iter()
            .map(|r| match r {
                RtValue::Tensor(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        if let Some(tensors) = tensors {
            self.constants.keep(&g.name, n, g.nodes[n].op == Op::Constant, &tensors);
        }
        Ok(results)
    }

    /// The kernel that runs node `n` on the device, when there is a device and it has one.
    fn device_kernel(&self, n: Node) -> Option<Arc<dyn DeviceKernel>> {
        self.residency?;
        let op = self.graph.nodes[n].op;
        if op != Op::Fusion && !kernels::is_kernel(op) {
            return None;
        }
        self.compiled?.device_kernel(&self.graph.name, n)
    }

    /// Runs node `n` on the device with kernel `k`, copying in the operands that are on the
    /// host; its results stay on the device. Returns them, and the operands it copied in.
    fn run_on_device(&mut self, n: Node, k: &dyn DeviceKernel, args: Vec<RtValue>) -> Result<RunOnDevice, RunError> {
        let residency = self.residency.ok_or_else(|| RunError::internal("a device kernel without a device"))?;
        let values = &self.graph.nodes[n].operands;
        let mut copied: Vec<(Value, Arc<dyn DeviceTensor>)> = Vec::new();
        let mut operands = Vec::with_capacity(args.len());
        for (i, (a, &v)) in args.iter().zip(values).enumerate() {
            operands.push(match a {
                RtValue::Device(d) => d.clone(),
                RtValue::Tensor(t) => {
                    // An operand read twice is copied once.
                    if let Some((_, d)) = copied.iter().find(|(w, _)| *w == v) {
                        operands.push(d.clone());
                        continue;
                    }
                    let d = residency.upload(t, self.long_lived(v)).map_err(|m| {
                        RunError::new(ErrorKind::Kernel, format!("operand {i} to {}: {m}", residency.device().name()))
                    })?;
                    copied.push((v, d.clone()));
                    d
                }
                _ => return Err(RunError::internal(format!("operand {i} is not a tensor"))),
            });
        }
        drop(args);
        let out = k.run(&operands).map_err(|m| RunError::new(ErrorKind::Kernel, m))?;
        Ok((out.into_iter().map(RtValue::Device).collect(), copied))
    }

    /// Whether value `v` outlives the run on the host (a variable's value, a constant, a
    /// step-invariant result), so that its device copy is worth keeping while it does.
    fn long_lived(&self, v: Value) -> bool {
        match self.graph.values[v].def {
            graphc_ir::ValueDef::Result(p, _) => {
                matches!(self.graph.nodes[p].op, Op::Read | Op::Constant) || self.invariant.contains(&p)
            }
            graphc_ir::ValueDef::Param(..) => false,
        }
    }

    /// `v` with a tensor in a device's memory copied to the host, if the copy fits the memory
    /// budget beside what is live.
    fn on_host(&self, v: RtValue) -> Result<RtValue, RunError> {
        match (v, self.residency) {
            (RtValue::Device(d), Some(r)) => {
                let bytes = crate::limits::tensor_bytes(&d.ty()).unwrap_or(u64::MAX);
                self.ledger.check(bytes, self.graph)?;
                let t = r
                    .download(&*d)
                    .map_err(|m| RunError::new(ErrorKind::Kernel, format!("{}: {m}", r.device().name())))?;
                Ok(RtValue::Tensor(t))
            }
            (RtValue::Device(_), None) => Err(RunError::internal("a device's tensor where no device is")),
            (v, _) => Ok(v),
        }
    }

    /// Node `n` on operands some of which are in a device's memory, where the host need not
    /// see their elements (their types are enough): `None` when it must.
    fn on_device_as_is(&self, n: Node, args: &[RtValue]) -> Option<Result<Vec<RtValue>, RunError>> {
        let nd = &self.graph.nodes[n];
        let RtValue::Device(d) = args.first()? else { return None };
        if !takes_device_values_as_they_are(nd.op) {
            return None;
        }
        let dims = || d.ty().shape.iter().map(|&x| x as i64).collect::<Vec<i64>>();
        Some(match nd.op {
            Op::Identity => Ok(vec![args[0].clone()]),
            Op::Reshape => {
                let ty = self.graph.values[nd.results[0]].ty.as_tensor()?.clone();
                d.reshaped(&ty).map(|r| vec![RtValue::Device(r)]).map_err(|m| RunError::new(ErrorKind::Kernel, m))
            }
            Op::Shape => Ok(vec![RtValue::tensor(Tensor::I64(ndarray::Array1::from(dims()).into_dyn()))]),
            Op::Rank => Ok(vec![RtValue::tensor(Tensor::I64(ndarray::arr0(dims().len() as i64).into_dyn()))]),
            _ => return None,
        })
    }

    /// Runs a node through compiled code when there is some, else through `interpret`, on the
    /// host: operands in a device's memory are copied out first, but those control flow
    /// passes into its regions.
    fn compute(&mut self, n: Node, args: Vec<RtValue>) -> Result<Vec<RtValue>, RunError> {
        let g = self.graph;
        let nd = &g.nodes[n];
        // Without a device every operand is on the host already.
        let args = match self.residency {
            None => args,
            Some(_) => {
                if let Some(done) = self.on_device_as_is(n, &args) {
                    self.ran = Ran::Interpreter;
                    return done;
                }
                args.into_iter()
                    .enumerate()
                    .map(|(i, a)| match nd.op {
                        Op::While | Op::Fusion => Ok(a),
                        Op::Cond if i > 0 => Ok(a),
                        _ => self.on_host(a),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        if let Some(compiled) = self.compiled.filter(|_| nd.op == Op::Fusion || kernels::is_kernel(nd.op)) {
            // The operands move into the kernel's hands: nothing else here may hold them.
            let shared = args
                .into_iter()
                .enumerate()
                .map(|(i, a)| match a {
                    RtValue::Tensor(t) => Ok(t),
                    _ => Err(RunError::internal(format!("operand {i} is not a tensor"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut operands = Operands::new(shared, self.pool);
            let out = compiled.run(&g.name, n, &mut operands);
            if let Some(out) = out {
                let out = out.map_err(|m| RunError::new(ErrorKind::Kernel, m))?;
                self.ran = Ran::Compiled(None);
                return Ok(out.into_iter().map(RtValue::tensor).collect());
            }
            // Not compiled: the operands come back untouched.
            let args = operands.into_shared().into_iter().map(RtValue::Tensor).collect();
            return self.interpret_as_ran(n, args);
        }
        self.interpret_as_ran(n, args)
    }

    /// [`Interp::interpret`], noting what ran the node (after a region's nodes noted theirs).
    fn interpret_as_ran(&mut self, n: Node, args: Vec<RtValue>) -> Result<Vec<RtValue>, RunError> {
        let out = self.interpret(n, args);
        let op = self.graph.nodes[n].op;
        self.ran = if op == Op::Fusion || kernels::is_kernel(op) { Ran::Reference } else { Ran::Interpreter };
        out
    }

    fn interpret(&mut self, n: Node, args: Vec<RtValue>) -> Result<Vec<RtValue>, RunError> {
        let g = self.graph;
        let nd = &g.nodes[n];
        let name = || nd.attrs.str("name").ok_or_else(|| RunError::internal("a state declaration without a name"));
        let key = || self.rendezvous_key(nd.attrs.str("key").unwrap_or_default());
        let tensor = |i: usize| {
            args.get(i)
                .and_then(RtValue::as_tensor)
                .ok_or_else(|| RunError::internal(format!("operand {i} is not a tensor")))
        };
        let one = |t: Tensor| Ok(vec![RtValue::tensor(t)]);
        match nd.op {
            op if kernels::is_kernel(op) => {
                let inputs = (0..args.len()).map(tensor).collect::<Result<Vec<_>, _>>()?;
                let types: Vec<TensorType> =
                    nd.results.iter().filter_map(|&v| g.values[v].ty.as_tensor().cloned()).collect();
                let out =
                    kernels::eval(op, &nd.attrs, &inputs, &types).map_err(|e| RunError::new(ErrorKind::Kernel, e.0))?;
                for a in args {
                    self.release(Some(a));
                }
                Ok(out.into_iter().map(RtValue::tensor).collect())
            }
            Op::Variable => Ok(vec![RtValue::Var(self.state.variable(name()?)?.clone())]),
            Op::Queue => Ok(vec![RtValue::Queue(self.state.queue(name()?)?.clone())]),
            Op::Read => Ok(vec![RtValue::Tensor(var(&args[0])?.read()?)]),
            Op::Assign => {
                let value = args.get(1).cloned().ok_or_else(|| RunError::internal("assign without a value"))?;
                let RtValue::Tensor(t) = &value else { return Err(RunError::internal("assign of a non-tensor")) };
                var(&args[0])?.assign(Some(t.clone()))?;
                Ok(vec![value])
            }
            Op::AssignAdd => Ok(vec![RtValue::Tensor(var(&args[0])?.assign_add(tensor(1)?)?)]),
            Op::ApplySgd | Op::ApplyMomentum | Op::ApplyAdam | Op::ApplyRmsprop => {
                Ok(vec![RtValue::Tensor(optimizer::apply(nd.op, &nd.attrs, &args)?)])
            }
            Op::Grad => Err(RunError::internal(kernels::GRAD_UNEXPANDED)),
            Op::Enqueue => {
                let item = args[1..]
                    .iter()
                    .map(|a| match a {
                        RtValue::Tensor(t) => Ok(t.clone()),
                        _ => Err(RunError::internal("enqueue of a non-tensor")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // What a queue holds is live until it is dequeued, however many steps later.
                let q = queue(&args[0])?;
                let bytes = item.iter().map(|t| bytes_of(t)).fold(0u64, u64::saturating_add);
                let budget = self.ledger.budget();
                budget
                    .try_charge(bytes, &format!("enqueue to queue \"{}\" ({} held)", q.name, q.len()))
                    .map_err(|m| RunError::new(ErrorKind::ResourceExhausted, m))?;
                if let Err(e) = q.enqueue(&self.wait, item) {
                    budget.refund(bytes);
                    return Err(e);
                }
                self.wait.progress();
                Ok(vec![RtValue::Token])
            }
            Op::Dequeue => {
                let items = queue(&args[0])?.dequeue(&self.wait)?;
                self.ledger.budget().refund(items.iter().map(|t| bytes_of(t)).fold(0u64, u64::saturating_add));
                self.wait.progress();
                Ok(items.into_iter().map(RtValue::Tensor).collect())
            }
            Op::QueueClose => {
                queue(&args[0])?.close();
                self.wait.progress();
                Ok(vec![RtValue::Token])
            }
            Op::QueueSize => one(Tensor::I64(ndarray::arr0(queue(&args[0])?.len() as i64).into_dyn())),
            Op::NoOp => Ok(vec![RtValue::Token]),
            Op::Send => {
                self.rendezvous.send(key(), args[0].clone())?;
                self.wait.progress();
                Ok(vec![RtValue::Token])
            }
            Op::Recv => Ok(vec![self.rendezvous.recv(&self.wait, &key())?]),
            Op::Cond => {
                let Some(Tensor::Bool(p)) = args.first().and_then(RtValue::as_tensor) else {
                    return Err(RunError::internal("cond predicate is not a bool tensor"));
                };
                let pred = p.iter().next().copied().ok_or_else(|| RunError::internal("cond predicate is empty"))?;
                let region = nd.regions[if pred { 0 } else { 1 }];
                self.run_region(region, args[1..].to_vec())
            }
            Op::While => {
                let (cond, body) = (nd.regions[0], nd.regions[1]);
                self.iterations.push(0);
                self.loops.push(n);
                let result = self.run_loop(cond, body, args);
                self.loops.pop();
                self.iterations.pop();
                result
            }
            Op::Fusion => self.run_region(nd.regions[0], args),
            op => Err(RunError::internal(format!("the interpreter has no rule for '{}'", op.name()))),
        }
    }

    /// Iterates a while loop whose frame (`iterations`, `loops`) the caller has pushed.
    fn run_loop(&mut self, cond: Region, body: Region, mut values: Vec<RtValue>) -> Result<Vec<RtValue>, RunError> {
        loop {
            self.check_stop()?;
            let go = self.run_region(cond, values.clone())?.into_iter().next().map(|v| self.on_host(v)).transpose()?;
            match go.as_ref().and_then(RtValue::as_tensor) {
                Some(Tensor::Bool(b)) if b.len() == 1 => {
                    if !b.iter().next().copied().unwrap_or(false) {
                        return Ok(values);
                    }
                }
                _ => return Err(RunError::internal("while condition did not yield a bool scalar")),
            }
            values = self.run_region(body, values)?;
            if let Some(i) = self.iterations.last_mut() {
                *i += 1;
            }
        }
    }

    /// A key inside loops gets the iteration path, so each iteration's send meets its recv.
    fn rendezvous_key(&self, key: &str) -> String {
        rendezvous_key(key, &self.iterations)
    }
}

/// Ops that take a device value as it is, reading only its type (identity, and reshape, a
/// view of the same memory) or nothing of it at all (shape, rank).
fn takes_device_values_as_they_are(op: Op) -> bool {
    matches!(op, Op::Identity | Op::Reshape | Op::Shape | Op::Rank)
}

fn unbound(v: Value) -> RunError {
    RunError::internal(format!("value {v} is used before it has a value"))
}

fn var(v: &RtValue) -> Result<&Arc<Variable>, RunError> {
    match v {
        RtValue::Var(x) => Ok(x),
        _ => Err(RunError::internal("expected a variable handle")),
    }
}

fn queue(v: &RtValue) -> Result<&Arc<Queue>, RunError> {
    match v {
        RtValue::Queue(x) => Ok(x),
        _ => Err(RunError::internal("expected a queue handle")),
    }
}
