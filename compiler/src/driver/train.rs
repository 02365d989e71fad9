//! `graphc train`: a step graph run for a number of steps on one session, fed batches by an
//! input pipeline that is itself IR, with checkpoints that keep the data position.
//!
//! The pipeline, as TensorFlow's queue runners built it: [`plan`] adds to the module a queue
//! (`capacity` = [`PREFETCH`] batches) and a producer graph that enqueues one batch into it, and
//! rebuilds the step graph with its data inputs replaced by one `dequeue` from that queue. A
//! producer thread runs the producer graph once per batch, each its own run of the session,
//! feeding it the next batch of the [`Dataset`]; the step runs dequeue them in order, so step
//! `k` gets the `k`-th batch whatever the timing, and the queue bounds how far the producer runs
//! ahead. Both graphs go through the backend's pipeline, placement and partitioning like any
//! other (the queue's users are colocated with it by name). The producer blocks on a full
//! queue while a step runs, and a step on an empty one while a batch is cut, so deadlock
//! detection is off for the session (the producer is another thread, which detection cannot
//! see coming); `--timeout` still bounds every step, and a producer's enqueue that times out
//! waiting for room is retried (it is waiting on the steps, which are bounded).
//!
//! Checkpoints are the runtime's safetensors files with the step, the shuffling seed and the
//! data position in their metadata (`graphc.train.*`), written atomically, in the background
//! every `--checkpoint-every` steps: a run restored from one takes up exactly the batches the
//! uninterrupted run would have seen from that step.

use super::dataset::{Dataset, Position};
use super::inputs::{make_inputs, select_graphs, Inputs};
use super::job::Job;
use super::place::{place_graphs, Devices};
use super::report::Reported;
use crate::placement::partition::Partitioned;
use anyhow::{anyhow, bail};
use graphc_ir::{Attr, Diagnostic, Graph, Module, NodeSpec, Op, SourceFile, TensorType, Type, Value};
use graphc_runtime::checkpoint::{self, Loaded, Snapshot};
use graphc_runtime::{ErrorKind, RunError, Session, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Batches the queue holds: how far the producer may run ahead of the steps.
pub const PREFETCH: i64 = 4;

/// The names the pipeline's queue and producer graph take (with a suffix if the module has
/// them already).
const QUEUE: &str = "train.batches";
const PRODUCER: &str = "train_feed";

const META_SEED: &str = checkpoint::meta::SEED;
const META_EPOCH: &str = checkpoint::meta::EPOCH;
const META_BATCH: &str = checkpoint::meta::BATCH;
const META_BATCH_SIZE: &str = checkpoint::meta::BATCH_SIZE;
const META_EXAMPLES: &str = checkpoint::meta::EXAMPLES;

/// What `graphc train` takes from the command line to plan the training.
#[derive(Debug)]
pub struct TrainSpec<'a> {
    /// The step graph; `None`: as for `graphc run` (the only graph, else the first).
    pub graph: Option<&'a str>,
    /// The data directory; `None`: seeded random inputs, the same every step.
    pub data: Option<&'a Path>,
    /// `--batch`, checked against the step inputs' leading dim.
    pub batch: Option<u64>,
    pub seed: u64,
    /// `--memory-limit`: the data set (or the random inputs) is checked against it before it
    /// is read, and the session gets what it leaves ([`Training::memory_left`]).
    pub memory_limit: Option<u64>,
}

/// The input pipeline added to the module.
#[derive(Debug)]
pub struct Pipeline {
    /// The queue's name in the session.
    pub queue: String,
    /// The producer graph (enqueues one batch per run).
    pub producer: String,
    /// The step inputs it feeds, in the queue's order.
    pub inputs: Vec<String>,
}

/// A training planned: the step graph, its data, and how it reaches the steps.
#[derive(Debug)]
pub struct Training {
    pub graph: String,
    pub seed: u64,
    pub dataset: Option<Dataset>,
    pub pipeline: Option<Pipeline>,
    /// Inputs given seeded random data (no --data), as `NAME TYPE`.
    pub random: Vec<String>,
    /// The step graph's feeds when it has no pipeline.
    feeds: BTreeMap<String, Arc<Tensor>>,
    /// What the memory limit leaves the session once the data set is in memory (`None`: no
    /// data set, the limit as given).
    pub memory_left: Option<u64>,
}

/// Checks the step graph (a float scalar output `loss`), loads and checks the data, and with
/// data adds the input pipeline to the module (see the module's header).
pub fn plan(spec: &TrainSpec<'_>, file: &SourceFile, mut module: Module) -> anyhow::Result<(Module, Training)> {
    let wanted: Vec<String> = spec.graph.iter().map(|g| g.to_string()).collect();
    let graph = select_graphs(&wanted, file, &module)?.remove(0);
    let g = module.graph(&graph).expect("selected graphs exist");
    check_loss(g)?;
    for n in unreached_updates(g) {
        let name = g.nodes[n].results.first().and_then(|&v| g.values[v].name.clone());
        let example = match &name {
            Some(name) => format!(" (`%out = identity %loss after(%{name})`, returning %out as loss)"),
            None => String::new(),
        };
        let message = format!(
            "no output of @{graph} depends on {}, so it never runs and its variable is never updated; make the loss output depend on it{example}",
            g.describe(n)
        );
        eprint!("{}", Diagnostic::warning(g.nodes[n].span, message).render(file));
    }
    let Some(dir) = spec.data else {
        let inputs = Inputs {
            graphs: std::slice::from_ref(&graph),
            flags: &[],
            fetches: &[],
            seed: spec.seed,
            memory_limit: spec.memory_limit,
        };
        let made = make_inputs(&inputs, file, &module)?;
        let feeds = made.inputs.into_iter().next().unwrap_or_default();
        let training = Training {
            graph,
            seed: spec.seed,
            dataset: None,
            pipeline: None,
            random: made.random,
            feeds,
            memory_left: None,
        };
        return Ok((module, training));
    };
    let limit = graphc_runtime::budget::MemoryBudget::resolve(spec.memory_limit).map_err(|e| anyhow!("{e}"))?.limit();
    let dataset = Dataset::load(dir, g, spec.batch, limit)?;
    let fed: Vec<(String, TensorType)> = g
        .inputs()
        .iter()
        .filter_map(|&v| Some((g.values[v].name.clone()?, g.values[v].ty.as_tensor()?.clone())))
        .collect();
    let pipeline = add_pipeline(&mut module, &graph, &fed)?;
    let training = Training {
        graph,
        seed: spec.seed,
        memory_left: Some(limit.saturating_sub(dataset.bytes())),
        dataset: Some(dataset),
        pipeline: Some(pipeline),
        random: Vec::new(),
        feeds: BTreeMap::new(),
    };
    Ok((module, training))
}

/// The step graph must return a float scalar named `loss`.
fn check_loss(g: &Graph) -> anyhow::Result<()> {
    let Some(i) = g.outputs.iter().position(|o| o.name == "loss") else {
        let names: Vec<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
        let has =
            if names.is_empty() { "it has none".to_string() } else { format!("its outputs are {}", names.join(", ")) };
        bail!("@{} has no output named 'loss', which graphc train logs; {has}", g.name);
    };
    let ty = &g.values[g.output_values()[i]].ty;
    match ty.as_tensor() {
        Some(t) if t.dtype.is_float() && t.num_elements() == Some(1) => Ok(()),
        _ => bail!("output 'loss' of @{} is {ty}; graphc train logs a float scalar (f32[] or f64[])", g.name),
    }
}

/// The step graph's nodes that write a variable (themselves or inside their regions) but that
/// no output reaches through operands and `after` lists: a step runs only what its outputs
/// need, so they would never run.
fn unreached_updates(g: &Graph) -> Vec<graphc_ir::Node> {
    fn writes(g: &Graph, n: graphc_ir::Node) -> bool {
        let nd = &g.nodes[n];
        matches!(
            nd.op,
            Op::Assign | Op::AssignAdd | Op::ApplySgd | Op::ApplyMomentum | Op::ApplyAdam | Op::ApplyRmsprop
        ) || nd.regions.iter().any(|&r| g.regions[r].nodes.iter().any(|&m| writes(g, m)))
    }
    let mut reached = std::collections::HashSet::new();
    let mut stack: Vec<Value> = g.output_values().to_vec();
    while let Some(v) = stack.pop() {
        if let Some(p) = g.producer(v) {
            if reached.insert(p) {
                stack.extend(g.nodes[p].operands.iter().chain(&g.nodes[p].control_deps).copied());
            }
        }
    }
    g.regions[g.body].nodes.iter().copied().filter(|&n| !reached.contains(&n) && writes(g, n)).collect()
}

/// `base`, or `base_N` for the first N that `taken` does not refuse.
fn unique(base: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut name = base.to_string();
    let mut n = 1;
    while taken(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

/// Adds the queue and the producer graph, and rebuilds the step graph with its inputs `fed`
/// read from one `dequeue` of the queue (named as the inputs were).
fn add_pipeline(m: &mut Module, step: &str, fed: &[(String, TensorType)]) -> anyhow::Result<Pipeline> {
    let queues: Vec<String> = m
        .graphs
        .iter()
        .flat_map(|g| g.walk().into_iter().filter_map(|n| g.nodes[n].attrs.str("name").map(str::to_string)))
        .collect();
    let queue = unique(QUEUE, |n| queues.iter().any(|q| q == n));
    let producer = unique(PRODUCER, |n| m.graph(n).is_some());
    let types: Vec<TensorType> = fed.iter().map(|(_, t)| t.clone()).collect();
    let queue_node = || {
        NodeSpec::new(Op::Queue, Vec::<Value>::new())
            .attr("name", Attr::Str(queue.clone()))
            .attr("capacity", Attr::Int(PREFETCH))
            .declared(vec![Type::Queue(types.clone())])
    };
    let internal = |e: graphc_ir::ops::InferError| anyhow!("internal error building the input pipeline: {e}");

    let old = m.graph(step).expect("the step graph exists").clone();
    let mut g = Graph::new(old.name.clone());
    g.span = old.span;
    g.comments = old.comments.clone();
    let body = g.body;
    let mut map: HashMap<Value, Value> = HashMap::new();
    for &v in old.inputs() {
        let name = old.values[v].name.clone().unwrap_or_default();
        if !fed.iter().any(|(n, _)| *n == name) {
            let kept = g.add_input(&name, old.values[v].ty.clone());
            g.values[kept].span = old.values[v].span;
            map.insert(v, kept);
        }
    }
    let q = g.add(body, queue_node()).map_err(internal)?[0];
    let batch = g.add(body, NodeSpec::new(Op::Dequeue, vec![q])).map_err(internal)?;
    for ((name, _), &v) in fed.iter().zip(&batch) {
        g.set_name(v, name);
        let input = old.value_named(name).expect("fed inputs are the step graph's");
        map.insert(input, v);
    }
    for &n in &old.regions[old.body].nodes {
        let nd = &old.nodes[n];
        let operands = nd.operands.iter().map(|v| map[v]).collect();
        let deps = nd.control_deps.iter().map(|v| map[v]).collect();
        let results = g.import_node(body, &old, n, operands, deps).map_err(internal)?;
        map.extend(nd.results.iter().copied().zip(results));
    }
    g.set_outputs(old.outputs.iter().zip(old.output_values()).map(|(o, v)| (o.name.clone(), map[v])).collect());
    for (o, was) in g.outputs.iter_mut().zip(&old.outputs) {
        o.span = was.span;
    }
    g.regions[body].span = old.regions[old.body].span;
    g.regions[body].end_comments = old.regions[old.body].end_comments.clone();
    *m.graph_mut(step).expect("the step graph exists") = g;

    let mut p = Graph::new(producer.clone());
    p.comments = vec![format!(" graphc train's input pipeline: enqueues one batch of @{step}'s inputs")];
    let body = p.body;
    let inputs: Vec<Value> = fed.iter().map(|(n, t)| p.add_input(n, Type::Tensor(t.clone()))).collect();
    let q = p.add(body, queue_node()).map_err(internal)?[0];
    let done = p.add(body, NodeSpec::new(Op::Enqueue, [vec![q], inputs].concat())).map_err(internal)?[0];
    p.set_outputs(vec![("done".to_string(), done)]);
    m.graphs.push(p);

    if let Some(d) = graphc_ir::verify_module(m).first() {
        bail!("internal error: the module with the input pipeline does not verify: {}", d.message);
    }
    Ok(Pipeline { queue, producer, inputs: fed.iter().map(|(n, _)| n.clone()).collect() })
}

/// The step's requests, and the producer's partitions, after placement.
#[derive(Debug)]
pub struct TrainJob {
    /// One step: every output of the step graph (so no update is pruned), over its partitions.
    pub step: Job,
    /// The producer graph's partitions, with the pipeline.
    feed: Option<Partitioned>,
    /// Where each graph was placed, a line each (with --devices).
    pub placements: Vec<String>,
}

impl Training {
    /// Places and partitions the (optimized) module on the devices, and builds the step's
    /// requests and the producer's.
    pub fn prepare(&self, devices: &Devices, file: &SourceFile, module: Module) -> anyhow::Result<(Module, TrainJob)> {
        let outputs: Vec<String> = module
            .graph(&self.graph)
            .ok_or_else(|| anyhow!("internal error: the step graph @{} is gone after optimization", self.graph))?
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .collect();
        let mut graphs = vec![self.graph.clone()];
        graphs.extend(self.pipeline.iter().map(|p| p.producer.clone()));
        let (module, groups, placements) = place_graphs(devices, file, module, &graphs)?;
        let step = Job::new(
            &module,
            std::slice::from_ref(&self.graph),
            &groups,
            std::slice::from_ref(&self.feeds),
            &[outputs],
            &[],
        );
        let feed = match &self.pipeline {
            Some(p) => Some(
                groups
                    .iter()
                    .find(|g| g.graph == p.producer)
                    .cloned()
                    .ok_or_else(|| anyhow!("internal error: placement lost the producer graph @{}", p.producer))?,
            ),
            None => None,
        };
        Ok((module, TrainJob { step, feed, placements }))
    }

    /// Where training takes up: the steps done (the checkpoint's, else 0) and, with data, the
    /// position of the next batch: the checkpoint's when it has one, else where a run from the
    /// first batch would be. An error when the checkpoint's position cannot be taken up with
    /// this data (other examples or batch size).
    pub fn start(&self, resume: Option<&Resume>) -> anyhow::Result<(u64, Option<Position>)> {
        let step = resume.map_or(0, |r| r.step);
        let Some(d) = &self.dataset else { return Ok((step, None)) };
        match resume.and_then(|r| r.data.as_ref().map(|s| (r, s))) {
            Some((r, saved)) => {
                if saved.examples != d.examples || saved.batch_size != d.batch {
                    bail!(
                        "--restore {}: the checkpoint's run read {} examples in batches of {}, but --data has {} in batches of {}; its batches cannot be taken up where they stopped",
                        r.path.display(),
                        saved.examples,
                        saved.batch_size,
                        d.examples,
                        d.batch
                    );
                }
                if saved.position.batch >= d.batches_per_epoch() {
                    bail!(
                        "--restore {}: the checkpoint's data position (batch {} of epoch {}) is past the {} batches of an epoch",
                        r.path.display(),
                        saved.position.batch,
                        saved.position.epoch,
                        d.batches_per_epoch()
                    );
                }
                Ok((step, Some(saved.position)))
            }
            None => Ok((step, Some(d.position_of(step)))),
        }
    }

    /// Where training takes up at step `step` without a checkpoint of its own (a restarted
    /// worker of a cluster): the data position the uninterrupted run had there.
    pub fn start_at(&self, step: u64) -> (u64, Option<Position>) {
        (step, self.dataset.as_ref().map(|d| d.position_of(step)))
    }

    /// The metadata a checkpoint of this training holds besides the step.
    fn metadata(&self, position: Option<Position>) -> HashMap<String, String> {
        let mut meta = HashMap::new();
        meta.insert(META_SEED.to_string(), self.seed.to_string());
        if let (Some(d), Some(p)) = (&self.dataset, position) {
            meta.insert(META_EPOCH.to_string(), p.epoch.to_string());
            meta.insert(META_BATCH.to_string(), p.batch.to_string());
            meta.insert(META_BATCH_SIZE.to_string(), d.batch.to_string());
            meta.insert(META_EXAMPLES.to_string(), d.examples.to_string());
        }
        meta
    }

    /// Saves every variable, the step and the data position to `path`, atomically.
    pub fn save(&self, session: &Session, path: &Path, step: u64, position: Option<Position>) -> anyhow::Result<()> {
        save(&session.snapshot(), step, &self.metadata(position), path).map_err(|e| anyhow!("{e}"))
    }

    /// Runs the steps `steps` asks for, calling `on_step` after each, with the producer
    /// thread feeding the pipeline and, with `steps.periodic`, a writer thread saving
    /// checkpoints in the background (a failed save ends the run), until the last or until
    /// `steps.stop` is set. Returns the last step run and the data position after it, which a
    /// checkpoint takes to continue from there.
    pub fn run(
        &self,
        session: &Session,
        job: &TrainJob,
        file: &SourceFile,
        steps: &Steps<'_>,
        mut on_step: impl FnMut(&StepDone) -> anyhow::Result<()>,
    ) -> anyhow::Result<Ended> {
        let (from, to) = (steps.from, steps.to);
        let started = Instant::now();
        let stop = &AtomicBool::new(false);
        let writer = &Writer::default();
        std::thread::scope(|s| {
            let producer = match (&self.pipeline, &self.dataset, &job.feed, steps.position) {
                (Some(p), Some(dataset), Some(feed), Some(start)) => Some(s.spawn(move || {
                    let batches = Batches { dataset, seed: self.seed, start, count: to - from };
                    produce(session, p, feed, &batches, stop)
                })),
                _ => None,
            };
            let saver = steps.periodic.map(|_| s.spawn(move || writer.serve()));
            let result = self.steps(session, job, file, steps, writer, &mut on_step);
            // Wake and end the producer (its pending enqueue fails on the closed queue) and the
            // writer (after what is pending).
            stop.store(true, Ordering::SeqCst);
            if let Some(q) = self.pipeline.as_ref().and_then(|p| session.state().queues.get(&p.queue)) {
                q.close();
            }
            writer.finish();
            let produced = producer
                .map(|h| h.join().unwrap_or_else(|_| Err((0, RunError::internal("the producer thread panicked")))));
            if let Some(h) = saver {
                if h.join().is_err() {
                    return Err(anyhow!("internal error: the checkpoint writer panicked"));
                }
            }
            // A step that failed because the producer did (its queue closed) reports the
            // producer's error, the cause.
            if let Some(Err((i, e))) = produced {
                if result.is_err() {
                    return Err(render(
                        &e,
                        file,
                        &format!(" (the input pipeline, making the batch of step {})", from + i + 1),
                    ));
                }
            }
            let ended = result?;
            if let Some(e) = writer.failures().into_iter().next() {
                bail!("{e}");
            }
            tracing::info!(
                "@{}: ran steps {}..={} of {to} in {:.3} s",
                self.graph,
                from + 1,
                ended.step,
                started.elapsed().as_secs_f64()
            );
            Ok(ended)
        })
    }

    fn steps<'a>(
        &self,
        session: &Session,
        job: &TrainJob,
        file: &SourceFile,
        steps: &Steps<'a>,
        writer: &Writer<'a>,
        on_step: &mut impl FnMut(&StepDone) -> anyhow::Result<()>,
    ) -> anyhow::Result<Ended> {
        let (from, to, mut position) = (steps.from, steps.to, steps.position);
        let start = Instant::now();
        let mut last = Vec::new();
        let stopped = || steps.stop.is_some_and(|s| s.load(Ordering::SeqCst) != 0);
        for step in from + 1..=to {
            if stopped() {
                return Ok(Ended { step: step - 1, position });
            }
            let outs = match session.run_step(job.step.requests.clone()) {
                Ok(o) => o,
                Err(e) => return Err(render(&e, file, &format!(" (step {step} of {to})"))),
            };
            let (loss, single) = job
                .step
                .named_outputs(&outs)
                .into_iter()
                .find(|(n, _)| n == "loss")
                .and_then(|(_, v)| v.as_tensor().map(|t| (t.to_f64_vec()[0], t.dtype() == graphc_ir::DType::F32)))
                .ok_or_else(|| anyhow!("internal error: step {step} returned no loss"))?;
            position = match (&self.dataset, position) {
                (Some(d), Some(p)) => Some(d.next(p)),
                _ => position,
            };
            on_step(&StepDone { step, loss, single, elapsed: start.elapsed() })?;
            if let Some(e) = writer.failures().into_iter().next() {
                bail!("{e}; stopped after step {step}");
            }
            if let Some((to_where, every)) = steps.periodic {
                if step.is_multiple_of(every) && step < to {
                    let job: SaveJob<'a> = match to_where {
                        Periodic::File(path) => {
                            let (snapshot, meta) = (session.snapshot(), self.metadata(position));
                            Box::new(move || save(&snapshot, step, &meta, path))
                        }
                        Periodic::Cluster(client, index) => Box::new(move || {
                            client.checkpoint(index, step, false)?;
                            tracing::info!("saved the cluster's checkpoint at step {step}: {}", index.display());
                            Ok(())
                        }),
                    };
                    writer.submit(step, job);
                }
            }
            // The previous step's results are done with: their buffers take the next results.
            session.recycle(std::mem::replace(&mut last, outs));
        }
        Ok(Ended { step: to, position })
    }
}

/// Where a run ended: its last step (`Steps::to`, or before it when stopped) and the data
/// position after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub step: u64,
    pub position: Option<Position>,
}

/// Which steps a run takes: `from + 1 ..= to`, numbered from 1 over the whole training, the
/// first taking the batch at `position`; `periodic`: a checkpoint to save every so many steps.
#[derive(Clone, Copy, Debug)]
pub struct Steps<'a> {
    pub from: u64,
    pub to: u64,
    pub position: Option<Position>,
    pub periodic: Option<(Periodic<'a>, u64)>,
    /// Set non-zero (by a signal handler, say) to stop after the step in flight.
    pub stop: Option<&'a AtomicUsize>,
}

/// Where the periodic checkpoints of a run go.
#[derive(Clone, Copy, Debug)]
pub enum Periodic<'a> {
    /// The session's variables, the step and the data position, to this file.
    File(&'a Path),
    /// A cluster's (the chief's): the ps tasks' shards, then the index at this path.
    Cluster(&'a graphc_dist::Client, &'a Path),
}

/// What a step returned: its number (from 1 over the whole training), the loss, and the time
/// since this run's first step started.
#[derive(Clone, Copy, Debug)]
pub struct StepDone {
    pub step: u64,
    pub loss: f64,
    /// The loss is an f32 (`loss` holds it exactly).
    pub single: bool,
    pub elapsed: Duration,
}

/// A run-time error rendered against the source when it has a place there.
fn render(e: &RunError, file: &SourceFile, at: &str) -> anyhow::Error {
    let message = format!("{e}{at}");
    match e.span {
        Some(span) => Reported(Diagnostic::error(span, message).render(file)).into(),
        None => anyhow!(message),
    }
}

/// The batches one producer makes.
struct Batches<'a> {
    dataset: &'a Dataset,
    seed: u64,
    start: Position,
    count: u64,
}

/// The producer thread: runs the producer graph once per batch, `count` batches from
/// `start`. Stops early when told to or when the queue is closed (the steps ended); any other
/// failure closes the queue, so a step waiting on it fails instead of waiting forever, and is
/// returned with the index of the batch.
fn produce(
    session: &Session,
    pipeline: &Pipeline,
    feed: &Partitioned,
    b: &Batches<'_>,
    stop: &AtomicBool,
) -> Result<(), (u64, RunError)> {
    let wanted = ["done".to_string()];
    let mut position = b.start;
    let mut order: Option<(u64, Vec<usize>)> = None;
    for i in 0..b.count {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if order.as_ref().is_none_or(|(epoch, _)| *epoch != position.epoch) {
            order = Some((position.epoch, b.dataset.permutation(b.seed, position.epoch)));
        }
        let batch = b.dataset.batch(&order.as_ref().expect("made above").1, position);
        let feeds: Vec<(String, Arc<Tensor>)> = pipeline.inputs.iter().cloned().zip(batch).collect();
        let (requests, _) = feed.requests(session.module(), &feeds, &wanted);
        loop {
            match session.run_step(requests.clone()) {
                Ok(_) => break,
                Err(_) if stop.load(Ordering::SeqCst) => return Ok(()),
                Err(e) if e.kind == ErrorKind::QueueClosed => return Ok(()),
                // Waiting for room longer than --timeout: the steps are slow, not stuck (they
                // are bounded themselves); the batch waits its turn again.
                Err(e) if e.kind == ErrorKind::Timeout => continue,
                Err(e) => {
                    if let Some(q) = session.state().queues.get(&pipeline.queue) {
                        q.close();
                    }
                    return Err((i, e));
                }
            }
        }
        position = b.dataset.next(position);
    }
    Ok(())
}

/// A checkpoint to save: the writer thread runs it.
type SaveJob<'a> = Box<dyn FnOnce() -> Result<(), String> + Send + 'a>;

/// Saves checkpoints in the background: a step hands over a job (a snapshot's pointer copies,
/// or a cluster checkpoint's step) and goes on; the newest job waiting replaces any not yet
/// started.
#[derive(Default)]
struct Writer<'a> {
    pending: Mutex<Pending<'a>>,
    wake: Condvar,
}

#[derive(Default)]
struct Pending<'a> {
    next: Option<(u64, SaveJob<'a>)>,
    done: bool,
    failures: Vec<String>,
}

impl<'a> Writer<'a> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending<'a>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn submit(&self, step: u64, job: SaveJob<'a>) {
        self.lock().next = Some((step, job));
        self.wake.notify_all();
    }

    /// Failed saves not collected yet.
    fn failures(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().failures)
    }

    /// Writes what is pending, then ends [`Writer::serve`].
    fn finish(&self) {
        self.lock().done = true;
        self.wake.notify_all();
    }

    /// The writer thread: runs each job handed over until finished.
    fn serve(&self) {
        loop {
            let (step, job) = {
                let mut p = self.lock();
                while p.next.is_none() && !p.done {
                    p = self.wake.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                match p.next.take() {
                    Some(job) => job,
                    None => return,
                }
            };
            if let Err(e) = job() {
                self.lock().failures.push(format!("saving step {step}: {e}"));
            }
        }
    }
}

/// The runtime's checkpoint of `snapshot` at `step`, with `meta` added to its metadata,
/// written atomically.
fn save(snapshot: &Snapshot, step: u64, meta: &HashMap<String, String>, path: &Path) -> Result<(), String> {
    let bytes = checkpoint::encode(snapshot, Some(step)).map_err(|e| e.message)?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| e.to_string())?;
    let mut all = header.metadata().clone().unwrap_or_default();
    all.extend(meta.iter().map(|(k, v)| (k.clone(), v.clone())));
    let bytes =
        safetensors::serialize(st.tensors(), Some(all)).map_err(|e| format!("cannot encode the checkpoint: {e}"))?;
    let started = Instant::now();
    graphc_runtime::fsutil::write_atomically(path, |f| std::io::Write::write_all(f, &bytes))
        .map_err(|e| format!("cannot write checkpoint {}: {e}", path.display()))?;
    tracing::info!(
        "saved the checkpoint at step {step} to {} ({} bytes, {:.3} ms)",
        path.display(),
        bytes.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// The data position a checkpoint holds, and the data it was taken on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedPosition {
    pub position: Position,
    pub examples: u64,
    pub batch_size: u64,
}

/// A checkpoint to take training up from: read (and checked) before anything else, since its
/// seed decides the data; its variables are applied once the session exists.
#[derive(Debug)]
pub struct Resume {
    pub path: PathBuf,
    /// Steps done when it was saved (0 if it does not say).
    pub step: u64,
    /// The shuffling seed of the run that saved it, if it was `graphc train`'s.
    pub seed: Option<u64>,
    pub data: Option<SavedPosition>,
    loaded: Loaded,
}

impl Resume {
    /// Reads a checkpoint (a file, or a cluster's index and shards): variables, step, and
    /// `graphc train`'s metadata if it has some.
    pub fn read(path: &Path) -> anyhow::Result<Resume> {
        // A cluster's checkpoint (its index) reads as one process's, without a data position.
        let loaded = super::read_checkpoint(path)?;
        let invalid = |why: String| anyhow!("--restore: {} is not a valid checkpoint: {why}", path.display());
        // The runtime has checked that every field is a count.
        let field = |key: &str| loaded.train.get(key).copied();
        let seed = field(META_SEED);
        let keys = [META_EPOCH, META_BATCH, META_BATCH_SIZE, META_EXAMPLES];
        let data = match keys.map(field) {
            [Some(epoch), Some(batch), Some(batch_size), Some(examples)] => {
                let bad = |key: &str, value: u64, expected: String| {
                    invalid(format!("its metadata {key} is \"{value}\"; expected {expected}"))
                };
                if seed.is_none() {
                    return Err(invalid(format!(
                        "it has a data position but no {META_SEED}, the seed its batches were shuffled with"
                    )));
                }
                if batch_size == 0 {
                    return Err(bad(META_BATCH_SIZE, 0, "the examples in a batch, at least 1".into()));
                }
                if examples < batch_size {
                    return Err(bad(
                        META_EXAMPLES,
                        examples,
                        format!("the examples in the data, at least a batch ({META_BATCH_SIZE} is {batch_size})"),
                    ));
                }
                let per_epoch = examples / batch_size;
                if batch >= per_epoch {
                    return Err(bad(
                        META_BATCH,
                        batch,
                        format!(
                            "a batch of an epoch, below the {per_epoch} of {examples} examples in batches of {batch_size}"
                        ),
                    ));
                }
                Some(SavedPosition { position: Position { epoch, batch }, examples, batch_size })
            }
            [None, None, None, None] => None,
            fields => {
                let lacks: Vec<&str> = keys.iter().zip(fields).filter(|(_, v)| v.is_none()).map(|(k, _)| *k).collect();
                return Err(invalid(format!(
                    "its data position is incomplete: it lacks {} (it needs all of {})",
                    lacks.join(", "),
                    keys.join(", ")
                )));
            }
        };
        Ok(Resume { path: path.to_path_buf(), step: loaded.step.unwrap_or(0), seed, data, loaded })
    }

    /// The seed to shuffle with: `--seed` if given (it must agree with the checkpoint's), else
    /// the checkpoint's, else 0.
    pub fn seed(resume: Option<&Resume>, flag: Option<u64>) -> anyhow::Result<u64> {
        match (resume.and_then(|r| r.seed.map(|s| (r, s))), flag) {
            (Some((r, saved)), Some(s)) if s != saved => bail!(
                "--seed {s}: the checkpoint {} was trained with seed {saved}; leave --seed out to take up its batches",
                r.path.display()
            ),
            (Some((_, saved)), _) => Ok(saved),
            (None, s) => Ok(s.unwrap_or(0)),
        }
    }

    /// Checks the checkpoint's variables against the module's (names, dtypes and shapes),
    /// before anything else is checked: another model's checkpoint is refused for that, with
    /// the variables missing, extra or of another type.
    pub fn check(&self, module: &Module) -> anyhow::Result<()> {
        checkpoint::check_variables(&checkpoint::module_variables(module), &self.loaded, "the module")
            .map_err(|e| anyhow!("--restore {}: {e}", self.path.display()))
    }

    /// Gives the session's variables the checkpoint's values: all of them or, if it does not
    /// match the module, none.
    pub fn apply(&self, session: &Session) -> anyhow::Result<()> {
        checkpoint::restore(session.state(), &self.loaded)
            .map_err(|e| anyhow!("--restore {}: {e}", self.path.display()))
    }
}
