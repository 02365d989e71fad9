//! Executors: what runs one graph's part of a step. A session checks a step's requests,
//! decides which nodes of each graph must run, makes the step's rendezvous, and hands each
//! graph to its executor with an [`ExecContext`]; the executor runs the nodes and returns the
//! fetched values ([`ExecOutput`]).
//!
//! The reference interpreter, with a backend's [`crate::compiled::CompiledKernels`] or without, is the
//! first executor ([`crate::InterpExecutor`]) and every session's default. Another executor
//! (a device that keeps tensors in its own memory) serves the graphs it is set for
//! ([`crate::Session::set_executor`]), typically one partition of a step.
//!
//! # What an executor must do
//!
//! - Run exactly the nodes [`ExecContext::is_needed`] admits, each in the order of its region
//!   (the region's node list is a topological order); a fed value keeps its fed tensor and its
//!   producer does not run. Nodes not needed have no effects.
//! - Give every value it produces the type the graph says (`graph.values[v].ty`), as the
//!   interpreter checks for each node it runs, and return the fetches' values in the order of
//!   [`ExecContext::fetches`] (the session checks their number and types again, and fails the
//!   step with an internal error naming the graph when they are wrong).
//! - Honour the wait context: call [`WaitCtx::check_stop`] before each node and each loop
//!   iteration, block only through [`WaitCtx::block`] (or poll `check_stop` while waiting
//!   some other way), and call [`WaitCtx::progress`] after each send, enqueue, dequeue and
//!   queue close. Stateful ops go through [`ExecContext::state`], where the session's other
//!   runs see them.
//! - Use the rendezvous only at `send` and `recv`, with keys made by
//!   [`crate::rendezvous_key`] from the node's `key` attribute and the iteration numbers of
//!   the enclosing loops, so that graphs on different executors meet. What crosses it is a
//!   host [`RtValue`]: a device executor copies to the host at send and from it at recv.
//! - Count the host tensors it holds against [`ExecContext::budget`], refuse tensors larger
//!   than [`ExecContext::max_tensor_bytes`], and, when [`ExecContext::trace`] says so, record
//!   a [`NodeEvent`] per node execution up to that many.
//! - Report a node's failure as a [`RunError`] located at the node
//!   ([`RunError::at_node`]); never panic on bad data.

use crate::budget::MemoryBudget;
use crate::constants::ConstantCache;
use crate::error::RunError;
use crate::frames::Layout;
use crate::liveness::Liveness;
use crate::pool::BufferPool;
use crate::rendezvous::Rendezvous;
use crate::state::State;
use crate::tensor::Tensor;
use crate::value::RtValue;
use crate::wait::WaitCtx;
use graphc_ir::{Graph, Node, Value};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

/// Runs one graph's part of a step. One executor may serve several graphs and several steps
/// at once (concurrent runs of a session, the graphs of one step on their own threads).
pub trait Executor: Send + Sync + Debug {
    /// Runs the needed nodes of `cx.graph()` and returns the fetched values.
    fn run(&self, cx: ExecContext<'_>) -> Result<ExecOutput, RunError>;
}

/// What an executor gets for one graph of one step. Only sessions make one.
#[derive(Debug)]
pub struct ExecContext<'a> {
    pub(crate) graph: &'a Graph,
    pub(crate) step: u64,
    pub(crate) feeds: HashMap<Value, Arc<Tensor>>,
    pub(crate) fetches: &'a [Value],
    pub(crate) needed: &'a HashSet<Node>,
    pub(crate) state: &'a State,
    pub(crate) rendezvous: &'a dyn Rendezvous,
    pub(crate) wait: WaitCtx<'a>,
    pub(crate) pool: &'a BufferPool,
    pub(crate) constants: &'a ConstantCache,
    pub(crate) budget: &'a Arc<MemoryBudget>,
    pub(crate) max_tensor_bytes: u64,
    pub(crate) liveness: Option<&'a Liveness>,
    pub(crate) layout: &'a Layout,
    /// The most events to record, when tracing.
    pub(crate) trace: Option<usize>,
}

impl<'a> ExecContext<'a> {
    /// The graph to run.
    pub fn graph(&self) -> &'a Graph {
        self.graph
    }

    /// The step's number in its session (the one its rendezvous was made for).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The fed values, checked against their types: graph inputs, or any value of the body
    /// whose producer then does not run.
    pub fn feeds(&self) -> &HashMap<Value, Arc<Tensor>> {
        &self.feeds
    }

    /// Takes the feeds, leaving none; for an executor that binds them as its first values.
    pub fn take_feeds(&mut self) -> HashMap<Value, Arc<Tensor>> {
        std::mem::take(&mut self.feeds)
    }

    /// The values to return, in order (values of the graph's body).
    pub fn fetches(&self) -> &'a [Value] {
        self.fetches
    }

    /// The nodes of the graph's body that must run: what the fetches and targets need, and
    /// what the step's other graphs receive from this one. Nodes inside regions run with the
    /// node that holds the region.
    pub fn needed(&self) -> &'a HashSet<Node> {
        self.needed
    }

    /// Whether body node `n` must run.
    pub fn is_needed(&self, n: Node) -> bool {
        self.needed.contains(&n)
    }

    /// The session's variables and queues.
    pub fn state(&self) -> &'a State {
        self.state
    }

    /// The step's rendezvous, for send and recv.
    pub fn rendezvous(&self) -> &'a dyn Rendezvous {
        self.rendezvous
    }

    /// The run's wait context: cancellation, the step's deadline, the wait timeout.
    pub fn wait(&self) -> &WaitCtx<'a> {
        &self.wait
    }

    /// The session's recycled host buffers.
    pub fn pool(&self) -> &'a BufferPool {
        self.pool
    }

    /// The session's step-invariant values (constants and what depends on them alone),
    /// computed once.
    pub fn constants(&self) -> &'a ConstantCache {
        self.constants
    }

    /// The session's memory budget for host tensors.
    pub fn budget(&self) -> &'a Arc<MemoryBudget> {
        self.budget
    }

    /// The largest tensor a node may produce, in bytes.
    pub fn max_tensor_bytes(&self) -> u64 {
        self.max_tensor_bytes
    }

    /// The values no node after `n` reads (operands `n` reads last, results nothing reads),
    /// in `n`'s region; an executor may free them once `n` has run, unless they are fetched.
    pub fn dead_after(&self, n: Node) -> &'a [Value] {
        self.liveness.map_or(&[], |l| l.dead_after(n))
    }

    /// The graph's frames: where each value is bound while its region runs.
    pub(crate) fn layout(&self) -> &'a Layout {
        self.layout
    }

    /// `Some(max)` when the session traces: record a [`NodeEvent`] per node execution, at most
    /// `max`, and count the rest in [`ExecOutput::events_dropped`].
    pub fn trace(&self) -> Option<usize> {
        self.trace
    }
}

/// What an executor returns for one graph of a step.
#[derive(Clone, Debug, Default)]
pub struct ExecOutput {
    /// The fetches' values, in the order of [`ExecContext::fetches`].
    pub values: Vec<RtValue>,
    /// Node executions, nested ones and loop iterations included.
    pub nodes_executed: usize,
    /// When tracing: node executions in the order they ended.
    pub events: Vec<NodeEvent>,
    /// Node executions past the trace's limit, counted but not recorded.
    pub events_dropped: u64,
}

/// One node execution, recorded when a session traces.
#[derive(Clone, Debug)]
pub struct NodeEvent {
    pub node: Node,
    pub start: Instant,
    pub end: Instant,
    /// For send and recv: the rendezvous key, qualified by the loop iteration.
    pub key: Option<String>,
    /// How many regions enclose the node (0 for the graph body).
    pub depth: usize,
    /// What ran it.
    pub ran: Ran,
}

/// What ran a node execution, as a [`NodeEvent`] records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ran {
    /// A reference kernel of the interpreter (a fusion without compiled code: its region's
    /// ops, one by one, on theirs).
    Reference,
    /// Compiled code on the host, from the tier named ([`crate::CompiledKernels::tier`]; `None`
    /// for kernels of no named tier).
    Compiled(Option<&'static str>),
    /// A device's kernel, on tensors in the device's memory, from the tier named.
    Device(Option<&'static str>),
    /// Nothing: a step-invariant result kept from an earlier step.
    Kept,
    /// The interpreter itself: an op that is no kernel (state, queues, control flow, send and
    /// recv, views of a device's tensors).
    Interpreter,
}

/// The most node executions a run records when tracing: a long loop would otherwise grow the
/// record without bound. Later ones are counted, not kept.
pub const MAX_EVENTS: usize = 1 << 20;
