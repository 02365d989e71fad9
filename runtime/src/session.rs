//! Sessions: a module plus its state (variables, queues), and `run` — partial execution by
//! feeds, fetches and targets, in the manner of TensorFlow's `Session::Run`.
//!
//! Only what the fetches and targets need runs: the nodes they reach backwards through
//! operands and `after` lists, stopping at fed values. Several runs may proceed at once from
//! different threads on one session; they share the state. A step of several graphs (the
//! partitions of one computation) runs them concurrently, joined by one rendezvous; the first
//! failure cancels the rest.
//!
//! The session decides what runs; an [`Executor`] runs it: the session's default (the
//! interpreter, with a backend's compiled kernels when it has some) or one set for the graph.
//! Each step gets its rendezvous from the session's [`RendezvousFactory`] and a number.

use crate::constants::ConstantCache;
use crate::error::{ErrorKind, RunError};
use crate::exec::InterpExecutor;
use crate::executor::{ExecContext, ExecOutput, Executor, NodeEvent};
use crate::frames::Layout;
use crate::liveness::Liveness;
use crate::pool::BufferPool;
use crate::rendezvous::{LocalRendezvousFactory, Rendezvous, RendezvousFactory};
use crate::state::State;
use crate::tensor::Tensor;
use crate::value::RtValue;
use crate::wait::{Activity, WaitCtx};
use graphc_ir::{verify_module, Graph, Module, Node, Type, Value};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a session's blocking ops behave.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// The longest a blocking op (enqueue, dequeue, recv) waits before failing; `None` waits
    /// as long as it takes.
    pub wait_timeout: Option<Duration>,
    /// The longest one step may run, blocking or not: a loop that never ends fails with
    /// `Timeout` at the loop. Checked between nodes and loop iterations (a single kernel is not
    /// interrupted). `None`: no limit.
    pub step_timeout: Option<Duration>,
    /// Fail a blocking op at once when every active run of the session is blocked. Right for a
    /// command-line run, where no other thread will come along; wrong for a library user whose
    /// producer thread may start its run later, hence off by default.
    pub detect_deadlock: bool,
    /// The largest tensor a run may create, in bytes; `None` means the machine's physical
    /// memory ([`crate::limits::default_max_tensor_bytes`]). A node whose result would be
    /// larger fails with `ResourceExhausted` instead of aborting the process.
    pub max_tensor_bytes: Option<u64>,
    /// Record when every node starts and ends ([`RunOutput::events`]), for timelines and
    /// profiles.
    pub trace: bool,
    /// The most node executions a traced run records; `None` means
    /// [`crate::MAX_EVENTS`]. Later ones are counted in [`RunOutput::events_dropped`].
    pub max_trace_events: Option<usize>,
    /// The bytes the session's live tensors may take together (see [`crate::budget`]); `None`
    /// means `GRAPHC_MEMORY_LIMIT`, else what the process may still allocate.
    pub memory_limit: Option<u64>,
    /// Set from another thread (a Ctrl-C handler) to stop every step of the session in
    /// progress where the deadline is checked: they fail with `Cancelled` ("interrupted").
    /// Steps started while it is set fail at their first node; the setter clears it.
    pub stop: Option<Arc<AtomicBool>>,
}

/// One graph's part of a step: what to feed, fetch and run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub graph: String,
    pub feeds: Vec<(String, Arc<Tensor>)>,
    /// Values to return, by output name or value name (`loss` or `%loss`). When neither
    /// fetches nor targets are given, every output of the graph is fetched.
    pub fetches: Vec<String>,
    /// Values whose producers must run, though nothing of them is returned.
    pub targets: Vec<String>,
    /// With no fetches and no targets, run only what the other graphs of the step need from
    /// this one (its sends to them) instead of fetching every output: a partition that holds
    /// nothing the caller asked for.
    pub supporting: bool,
}

impl RunRequest {
    pub fn new(graph: impl Into<String>) -> Self {
        RunRequest {
            graph: graph.into(),
            feeds: Vec::new(),
            fetches: Vec::new(),
            targets: Vec::new(),
            supporting: false,
        }
    }

    /// A request that fetches nothing and runs what the step's other graphs receive from it.
    pub fn supporting(graph: impl Into<String>) -> Self {
        RunRequest { supporting: true, ..RunRequest::new(graph) }
    }

    pub fn feed(mut self, name: impl Into<String>, t: impl Into<Arc<Tensor>>) -> Self {
        self.feeds.push((name.into(), t.into()));
        self
    }

    pub fn fetch(mut self, name: impl Into<String>) -> Self {
        self.fetches.push(name.into());
        self
    }

    pub fn target(mut self, name: impl Into<String>) -> Self {
        self.targets.push(name.into());
        self
    }
}

/// What a run returns: the fetched values in the order asked, and how much ran.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The names fetched (the output names when every output was fetched).
    pub names: Vec<String>,
    pub values: Vec<RtValue>,
    /// Node executions, nested ones and loop iterations included.
    pub nodes_executed: usize,
    /// With [`SessionOptions::trace`]: every node execution, in the order they ended, up to
    /// [`SessionOptions::max_trace_events`].
    pub events: Vec<NodeEvent>,
    /// Node executions past that limit, counted but not recorded.
    pub events_dropped: u64,
}

impl RunOutput {
    /// The fetched tensor `i`; `None` for a token or a handle.
    pub fn tensor(&self, i: usize) -> Option<&Tensor> {
        self.values.get(i).and_then(RtValue::as_tensor)
    }

    /// The fetched tensor of that name.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.names.iter().position(|n| n == name).and_then(|i| self.tensor(i))
    }
}

/// A module with its state, ready to run.
#[derive(Debug)]
pub struct Session {
    module: Arc<Module>,
    state: Arc<State>,
    activity: Activity,
    options: SessionOptions,
    max_bytes: u64,
    /// Workers for steps of several graphs, made on first need.
    threads: Mutex<Option<Arc<rayon::ThreadPool>>>,
    /// Buffers of values that died, for the next outputs.
    buffers: BufferPool,
    constants: ConstantCache,
    /// Where each graph's values die, and the frames they live in, by graph name.
    liveness: HashMap<String, (Liveness, Layout)>,
    /// The graphs whose steps run on their caller's thread, decided once: those that may wait
    /// on another thread or wake one (`threads::may_wait`), and those with no kernel worth
    /// splitting (`threads::has_parallel_work`).
    inline: HashSet<String>,
    /// What runs a graph with no executor of its own: the interpreter, with a backend's
    /// compiled code when the session was made with some.
    executor: Arc<dyn Executor>,
    /// Executors of particular graphs, by graph name.
    executors: HashMap<String, Arc<dyn Executor>>,
    /// Live tensor bytes of every run and queue, against the memory limit.
    budget: Arc<crate::budget::MemoryBudget>,
    /// Makes each step's rendezvous.
    rendezvous: Arc<dyn RendezvousFactory>,
    /// Steps started so far: the next step's number.
    steps: AtomicU64,
    /// What each request needs to run, by graph, fed values and roots ([`Session::needed`]).
    needed: Mutex<HashMap<NeededKey, Arc<HashSet<Node>>>>,
}

/// A request's graph, fed values (sorted) and roots.
type NeededKey = (String, Vec<Value>, Vec<Value>);

/// The most requests whose needed nodes a session keeps.
const NEEDED_KEPT: usize = 64;

impl Session {
    /// Creates a session: verifies the module and creates every variable (holding its `init`)
    /// and queue it declares.
    pub fn new(module: Module, options: SessionOptions) -> Result<Session, RunError> {
        let diags = verify_module(&module);
        if let Some(d) = diags.first() {
            return Err(RunError::invalid(format!(
                "the module does not verify ({} error{}); first: {}",
                diags.len(),
                if diags.len() == 1 { "" } else { "s" },
                d.message
            )));
        }
        let max_bytes = options.max_tensor_bytes.unwrap_or_else(crate::limits::default_max_tensor_bytes);
        let budget = Arc::new(crate::budget::MemoryBudget::resolve(options.memory_limit)?);
        crate::budget::check_variables(&module, &budget)?;
        let state = Arc::new(State::from_module(&module, max_bytes)?);
        let liveness = module
            .graphs
            .iter()
            .map(|g| {
                let l = Liveness::of(g);
                let layout = Layout::of(g, &l);
                (g.name.clone(), (l, layout))
            })
            .collect();
        let inline = module
            .graphs
            .iter()
            .filter(|g| {
                crate::threads::may_wait(g)
                    || (!crate::threads::has_parallel_work(g)
                        && crate::threads::nesting(g) <= crate::threads::INLINE_NESTING)
            })
            .map(|g| g.name.clone())
            .collect();
        Ok(Session {
            module: Arc::new(module),
            state,
            activity: Activity::default(),
            options,
            max_bytes,
            threads: Mutex::new(None),
            buffers: BufferPool::default(),
            constants: ConstantCache::default(),
            liveness,
            inline,
            executor: Arc::new(InterpExecutor::new()),
            executors: HashMap::default(),
            budget,
            rendezvous: Arc::new(LocalRendezvousFactory),
            steps: AtomicU64::new(0),
            needed: Mutex::new(HashMap::default()),
        })
    }

    /// A session that runs the nodes `compiled` has code for through it (a backend's kernels),
    /// and the rest through the reference kernels.
    pub fn with_compiled(
        module: Module,
        options: SessionOptions,
        compiled: Arc<dyn crate::compiled::CompiledKernels>,
    ) -> Result<Session, RunError> {
        let mut s = Session::new(module, options)?;
        s.executor = Arc::new(InterpExecutor::with_compiled(compiled));
        Ok(s)
    }

    /// Runs graph `graph` with `executor` (a device's, say) instead of the session's default;
    /// an error if the module has no such graph.
    pub fn set_executor(&mut self, graph: &str, executor: Arc<dyn Executor>) -> Result<(), RunError> {
        self.module.graph(graph).ok_or_else(|| RunError::invalid(format!("no graph @{graph} in the module")))?;
        self.executors.insert(graph.to_string(), executor);
        Ok(())
    }

    /// Runs every graph without an executor of its own with `executor`.
    pub fn set_default_executor(&mut self, executor: Arc<dyn Executor>) {
        self.executor = executor;
    }

    /// The executor that runs graph `graph`: its own, else the default.
    pub fn executor(&self, graph: &str) -> &Arc<dyn Executor> {
        self.executors.get(graph).unwrap_or(&self.executor)
    }

    /// Makes each step's rendezvous with `factory` instead of an in-process table: for steps
    /// whose graphs send to and receive from other processes.
    pub fn set_rendezvous(&mut self, factory: Arc<dyn RendezvousFactory>) {
        self.rendezvous = factory;
    }

    /// How many steps the session has started (each [`Session::run`] and
    /// [`Session::run_step`] whose requests passed their checks): the next step's number.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    pub fn module(&self) -> &Module {
        &self.module
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// Every variable's value at this moment; cheap (pointer copies), for checkpoints.
    pub fn snapshot(&self) -> crate::checkpoint::Snapshot {
        self.state.snapshot()
    }

    /// Saves every variable to a safetensors checkpoint, atomically.
    pub fn save(&self, path: &std::path::Path, step: Option<u64>) -> Result<(), RunError> {
        crate::checkpoint::save(&self.snapshot(), step, path)
    }

    /// Restores every variable from a checkpoint; changes nothing if it does not match.
    /// Returns the step the checkpoint was taken at, if it says.
    pub fn restore(&self, path: &std::path::Path) -> Result<Option<u64>, RunError> {
        let loaded = crate::checkpoint::load(path)?;
        crate::checkpoint::restore(&self.state, &loaded)?;
        Ok(loaded.step)
    }

    /// Runs one graph.
    pub fn run(&self, request: RunRequest) -> Result<RunOutput, RunError> {
        let mut out = self.run_step(vec![request])?;
        Ok(out.remove(0))
    }

    /// Gives a run's results back when the caller is done with them, so that the next step
    /// writes its outputs into their buffers instead of allocating new ones.
    pub fn recycle(&self, outputs: impl IntoIterator<Item = RunOutput>) {
        for out in outputs {
            for v in out.values {
                if let RtValue::Tensor(t) = v {
                    self.buffers.give(t);
                }
            }
        }
    }

    /// Bytes of tensors the session's runs and queues hold now, counted against its memory
    /// budget, and the budget.
    pub fn memory_in_use(&self) -> (u64, u64) {
        (self.budget.live(), self.budget.limit())
    }

    /// What the session's buffer pool has done so far.
    pub fn buffer_stats(&self) -> crate::pool::PoolStats {
        self.buffers.stats()
    }

    /// Runs several graphs concurrently as one step, each on its own thread, joined by one
    /// rendezvous. The first failure cancels the others; its error is the step's error.
    pub fn run_step(&self, requests: Vec<RunRequest>) -> Result<Vec<RunOutput>, RunError> {
        // Check everything before anything runs, so a bad request has no effects.
        let mut plans = requests.iter().map(|r| self.plan(r)).collect::<Result<Vec<_>, _>>()?;
        if plans.len() > 1 {
            link_transfers(&mut plans);
        }
        for p in &plans {
            check_inputs_fed(p)?;
        }
        let step = self.steps.fetch_add(1, Ordering::SeqCst);
        let rendezvous = self.rendezvous.rendezvous(step);
        let rendezvous = &*rendezvous;
        let cancelled = AtomicBool::new(false);
        // A limit too large for the clock is no limit.
        let deadline = self.options.step_timeout.and_then(|t| Some((Instant::now().checked_add(t)?, t)));
        self.activity.enter(plans.len());
        let run_one = |plan: Plan| {
            // An executor that panics (a bug, or a foreign executor's) fails its graph like an
            // error: the others are cancelled, and the session's count of active runs, which
            // deadlock detection compares with the blocked ones, stays right.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.execute(plan, step, rendezvous, &cancelled, deadline)
            }))
            .unwrap_or_else(|_| Err(RunError::internal("a step's graph panicked")));
            // The others hear of a failure before this run stops counting as active: in
            // between, one blocked in a recv would find every active run blocked and report a
            // deadlock in place of the failure.
            if let Err(e) = &result {
                cancelled.store(true, Ordering::Relaxed);
                rendezvous.abort(e);
            }
            self.activity.leave();
            result
        };
        let results: Vec<Result<RunOutput, RunError>> = if plans.len() == 1 {
            if plans.iter().any(|p| self.inline.contains(&p.graph.name)) {
                plans.into_iter().map(run_one).collect()
            } else {
                crate::threads::on_pool(|| plans.into_iter().map(run_one).collect())
            }
        } else {
            // Each graph of the step on a worker of its own (a graph blocked in a recv holds
            // its worker), from a pool that outlives the step: starting threads every step
            // would cost more than a small step itself.
            let pool = self.workers(plans.len())?;
            let slots: Vec<Mutex<Option<Result<RunOutput, RunError>>>> =
                plans.iter().map(|_| Mutex::new(None)).collect();
            pool.scope(|s| {
                for (plan, slot) in plans.into_iter().zip(&slots) {
                    let run_one = &run_one;
                    s.spawn(move |_| {
                        *crate::wait::lock(slot) = Some(run_one(plan));
                    });
                }
            });
            slots
                .into_iter()
                .map(|s| {
                    s.into_inner()
                        .unwrap_or_else(|e| e.into_inner())
                        .unwrap_or_else(|| Err(RunError::internal("a step's graph did not finish")))
                })
                .collect()
        };
        // The original failure, not the cancellations it caused.
        if let Some(e) = results.iter().filter_map(|r| r.as_ref().err()).min_by_key(|e| e.kind == ErrorKind::Cancelled)
        {
            return Err(e.clone());
        }
        Ok(results.into_iter().map(|r| r.expect("errors were returned above")).collect())
    }

    /// A worker pool with room for `n` graphs at once (and the thread that waits on them).
    fn workers(&self, n: usize) -> Result<Arc<rayon::ThreadPool>, RunError> {
        let mut pool = crate::wait::lock(&self.threads);
        if let Some(p) = pool.as_ref().filter(|p| p.current_num_threads() > n) {
            return Ok(p.clone());
        }
        let p = rayon::ThreadPoolBuilder::new()
            .num_threads(n + 1)
            .thread_name(|i| format!("graphc-device-{i}"))
            .start_handler(|_| crate::threads::mark_graph_thread())
            .build()
            .map_err(|e| RunError::internal(format!("cannot start worker threads: {e}")))?;
        let p = Arc::new(p);
        *pool = Some(p.clone());
        Ok(p)
    }

    /// Resolves names, checks feeds and finds the nodes to run.
    fn plan<'s>(&'s self, r: &RunRequest) -> Result<Plan<'s>, RunError> {
        let g = self.module.graph(&r.graph).ok_or_else(|| {
            let names: Vec<String> = self.module.graphs.iter().map(|g| format!("@{}", g.name)).collect();
            RunError::invalid(format!("no graph @{} in the module; it has {}", r.graph, names.join(", ")))
        })?;
        let mut feeds = Feeds::default();
        for (name, t) in &r.feeds {
            let v = resolve(g, name, "feed")?;
            let want = &g.values[v].ty;
            let Type::Tensor(want_t) = want else {
                return Err(RunError::invalid(format!("cannot feed '{name}': it is a {want}, not a tensor")));
            };
            if &t.ty() != want_t {
                return Err(RunError::invalid(format!(
                    "feed '{name}' of @{}: expected {want_t}, got {}",
                    g.name,
                    t.ty()
                )));
            }
            if feeds.insert(v, t.clone()).is_some() {
                return Err(RunError::invalid(format!("'{name}' is fed twice")));
            }
        }
        let (fetch_names, fetches): (Vec<String>, Vec<Value>) =
            if r.fetches.is_empty() && r.targets.is_empty() && !r.supporting {
                (g.outputs.iter().map(|o| o.name.clone()).collect(), g.output_values().to_vec())
            } else {
                let vals = r.fetches.iter().map(|n| resolve(g, n, "fetch")).collect::<Result<Vec<_>, _>>()?;
                (r.fetches.clone(), vals)
            };
        let targets = r.targets.iter().map(|n| resolve(g, n, "target")).collect::<Result<Vec<_>, _>>()?;
        let roots: Vec<Value> = fetches.iter().chain(&targets).copied().collect();
        let needed = self.needed(g, &feeds, &roots);
        Ok(Plan { graph: g, feeds, fetch_names, fetches, roots, needed })
    }

    /// The body nodes that `roots` need when `feeds` are fed ([`add_needed`]), found once per
    /// graph, fed values and roots, and kept: a request repeated every step (a model's
    /// inputs and outputs) does not walk its graph again.
    fn needed(&self, g: &Graph, feeds: &Feeds, roots: &[Value]) -> Arc<HashSet<Node>> {
        let mut fed: Vec<Value> = feeds.keys().copied().collect();
        fed.sort_unstable();
        let key = (g.name.clone(), fed, roots.to_vec());
        if let Some(n) = crate::wait::lock(&self.needed).get(&key) {
            return n.clone();
        }
        let mut needed = HashSet::default();
        add_needed(g, roots.iter().copied(), feeds, &mut needed);
        let needed = Arc::new(needed);
        let mut kept = crate::wait::lock(&self.needed);
        // Bounded: a caller varying its fetches without end must not grow the session.
        if kept.len() >= NEEDED_KEPT {
            kept.clear();
        }
        kept.insert(key, needed.clone());
        needed
    }

    fn execute(
        &self,
        plan: Plan<'_>,
        step: u64,
        rendezvous: &dyn Rendezvous,
        cancelled: &AtomicBool,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<RunOutput, RunError> {
        let g = plan.graph;
        let liveness =
            self.liveness.get(&g.name).ok_or_else(|| RunError::internal(format!("no layout for @{}", g.name)))?;
        let cx = ExecContext {
            graph: g,
            step,
            feeds: plan.feeds,
            fetches: &plan.fetches,
            needed: &plan.needed,
            state: &self.state,
            rendezvous,
            wait: WaitCtx::new(
                &self.activity,
                cancelled,
                self.options.wait_timeout,
                self.options.detect_deadlock,
                deadline,
                self.options.stop.as_deref(),
            ),
            pool: &self.buffers,
            constants: &self.constants,
            budget: &self.budget,
            max_tensor_bytes: self.max_bytes,
            liveness: Some(&liveness.0),
            layout: &liveness.1,
            trace: self.options.trace.then(|| self.options.max_trace_events.unwrap_or(crate::executor::MAX_EVENTS)),
        };
        let out: ExecOutput = self.executor(&g.name).run(cx)?;
        // What an executor other than the interpreter returns is checked as the interpreter
        // checks every value it makes.
        if out.values.len() != plan.fetches.len() {
            return Err(RunError {
                graph: Some(g.name.clone()),
                ..RunError::internal(format!(
                    "the executor returned {} values for {} fetches",
                    out.values.len(),
                    plan.fetches.len()
                ))
            });
        }
        for (r, (&v, name)) in out.values.iter().zip(plan.fetches.iter().zip(&plan.fetch_names)) {
            if let RtValue::Device(_) = r {
                return Err(RunError {
                    graph: Some(g.name.clone()),
                    ..RunError::internal(format!("the executor returned fetch '{name}' in a device's memory"))
                });
            }
            let (got, want) = (r.ty(), &g.values[v].ty);
            if &got != want {
                return Err(RunError {
                    graph: Some(g.name.clone()),
                    ..RunError::internal(format!("the executor returned {got} for fetch '{name}' of type {want}"))
                });
            }
        }
        Ok(RunOutput {
            names: plan.fetch_names,
            values: out.values,
            nodes_executed: out.nodes_executed,
            events: out.events,
            events_dropped: out.events_dropped,
        })
    }
}

/// Fed values by value.
type Feeds = HashMap<Value, Arc<Tensor>>;

/// A checked request.
struct Plan<'s> {
    graph: &'s Graph,
    feeds: Feeds,
    fetch_names: Vec<String>,
    fetches: Vec<Value>,
    /// The fetches and targets.
    roots: Vec<Value>,
    needed: Arc<HashSet<Node>>,
}

/// Every graph input that a node that runs (or a fetch) reads must be fed.
fn check_inputs_fed(p: &Plan<'_>) -> Result<(), RunError> {
    let g = p.graph;
    let mut missing = Vec::new();
    for &input in g.inputs() {
        let read =
            p.roots.contains(&input) || g.uses(input).iter().any(|u| u.user().is_some_and(|n| p.needed.contains(&n)));
        if read && !p.feeds.contains_key(&input) {
            missing.push(format!("'{}' ({})", g.values[input].name.as_deref().unwrap_or("?"), g.values[input].ty));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(RunError::invalid(format!(
        "@{} needs input{} {} but {} not fed",
        g.name,
        if missing.len() == 1 { "" } else { "s" },
        missing.join(", "),
        if missing.len() == 1 { "it was" } else { "they were" }
    )))
}

/// Makes a step's graphs run what the others receive from them: a needed node that holds a
/// recv (at any depth) makes the node holding the matching send needed in its graph, with
/// what that depends on, until nothing changes. Without this a partition would wait forever
/// for a send its own fetches do not need.
fn link_transfers(plans: &mut [Plan<'_>]) {
    // For each graph, the keys sent and received by each top-level node.
    let mut senders: std::collections::HashMap<&str, (usize, Node)> = std::collections::HashMap::new();
    let mut receives: Vec<std::collections::HashMap<Node, Vec<&str>>> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        let g = p.graph;
        let mut recvs: std::collections::HashMap<Node, Vec<&str>> = std::collections::HashMap::new();
        for &top in &g.regions[g.body].nodes {
            let mut inner = vec![top];
            while let Some(n) = inner.pop() {
                let nd = &g.nodes[n];
                if let Some(key) = nd.attrs.str("key") {
                    match nd.op {
                        graphc_ir::Op::Send => {
                            senders.insert(key, (i, top));
                        }
                        graphc_ir::Op::Recv => recvs.entry(top).or_default().push(key),
                        _ => {}
                    }
                }
                inner.extend(nd.regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
            }
        }
        receives.push(recvs);
    }
    let mut work: Vec<(usize, Node)> =
        plans.iter().enumerate().flat_map(|(i, p)| p.needed.iter().map(move |&n| (i, n))).collect();
    while let Some((i, n)) = work.pop() {
        let Some(keys) = receives[i].get(&n) else { continue };
        for key in keys.clone() {
            let Some(&(j, sender)) = senders.get(key) else { continue };
            let p = &mut plans[j];
            if p.needed.contains(&sender) || p.feeds.keys().any(|v| p.graph.producer(*v) == Some(sender)) {
                continue;
            }
            let needed = Arc::make_mut(&mut p.needed);
            needed.insert(sender);
            let nd = &p.graph.nodes[sender];
            let added = add_needed(p.graph, nd.operands.iter().chain(&nd.control_deps).copied(), &p.feeds, needed);
            work.push((j, sender));
            work.extend(added.into_iter().map(|m| (j, m)));
        }
    }
}

/// A value by output name, then by value name; `%` in front is optional.
fn resolve(g: &Graph, name: &str, what: &str) -> Result<Value, RunError> {
    let bare = name.strip_prefix('%').unwrap_or(name);
    if !name.starts_with('%') {
        if let Some(i) = g.outputs.iter().position(|o| o.name == bare) {
            return Ok(g.output_values()[i]);
        }
    }
    let found = g.value_named(bare).map(|v| outside_regions(g, v, name, what)).transpose()?;
    found
        .ok_or_else(|| {
            let mut known: Vec<String> = g.outputs.iter().map(|o| o.name.clone()).collect();
            known.extend(g.values.values().filter_map(|v| v.name.clone()));
            let mut msg = format!("cannot {what} '{name}': @{} has no output or value of that name", g.name);
            if let Some(s) = graphc_ir::suggest::closest(bare, known.iter().map(String::as_str)) {
                msg.push_str(&format!("; did you mean '{s}'?"));
            }
            msg
        })
        .map_err(RunError::invalid)
}

/// A value of the graph's body as is; one defined inside a region (a loop body, a branch, a
/// fusion) is an error naming the value and the node owning the region, at the value's place
/// in the source: it exists only while its region runs, once per iteration or not at all.
fn outside_regions(g: &Graph, v: Value, name: &str, what: &str) -> Result<Value, RunError> {
    let region = match g.values[v].def {
        graphc_ir::ValueDef::Result(n, _) => g.nodes[n].parent,
        graphc_ir::ValueDef::Param(r, _) => r,
    };
    if region == g.body {
        return Ok(v);
    }
    let rd = &g.regions[region];
    let owner = rd.parent.map(|n| format!(" of node {}", g.describe(n))).unwrap_or_default();
    let mut e = RunError::invalid(format!(
        "cannot {what} '{name}': it is defined inside the {} region{owner} of @{}, and exists only while that \
         region runs; {what} a value the node returns instead",
        if rd.label.is_empty() { "nested" } else { &rd.label },
        g.name
    ));
    e.span = (g.values[v].span != graphc_ir::Span::default()).then_some(g.values[v].span);
    Err(e)
}

/// Adds to `needed` the body nodes the roots depend on, through operands and `after` lists,
/// stopping at fed values, and returns the nodes it added. Regions are isolated, so
/// dependencies never leave the body.
fn add_needed(g: &Graph, roots: impl IntoIterator<Item = Value>, fed: &Feeds, needed: &mut HashSet<Node>) -> Vec<Node> {
    let mut added = Vec::new();
    let mut work: Vec<Value> = roots.into_iter().collect();
    while let Some(v) = work.pop() {
        if fed.contains_key(&v) {
            continue;
        }
        if let Some(n) = g.producer(v) {
            if needed.insert(n) {
                added.push(n);
                let nd = &g.nodes[n];
                work.extend(nd.operands.iter().chain(&nd.control_deps));
            }
        }
    }
    added
}
