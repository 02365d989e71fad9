//! Run-time errors: what went wrong, and where in the graph when a node is to blame.

use graphc_ir::Span;
use std::fmt;

/// What kind of failure a run hit, so callers can react (retry after a timeout, stop a reader
/// loop when its queue closes) without parsing messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A bad feed, fetch, target or graph name, or a feed of the wrong type.
    InvalidArgument,
    /// A kernel failed (integer division by zero, index out of range, ...).
    Kernel,
    /// A read of a variable that has no value yet.
    Uninitialized,
    /// An enqueue to a closed queue, or a dequeue from a closed, drained one.
    QueueClosed,
    /// A blocking op waited longer than the session allows.
    Timeout,
    /// A blocking op can never be woken: every run of the session is waiting.
    Deadlock,
    /// Another graph of the same step failed first, or the step was stopped from outside
    /// (`SessionOptions::stop`).
    Cancelled,
    /// A tensor would be larger than the session allows (see `SessionOptions`).
    ResourceExhausted,
    /// A checkpoint could not be written, read or applied.
    Checkpoint,
    /// Another task of the cluster failed, refused the request, or could not be reached.
    Remote,
    /// A broken invariant inside graphc (a bug, not the user's fault).
    Internal,
}

/// A run-time error, located at the node that failed when there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError {
    pub kind: ErrorKind,
    pub message: String,
    /// The graph and node that failed: `@step`, `'div %q'`.
    pub graph: Option<String>,
    pub node: Option<String>,
    /// The node's place in the source text, when the graph came from text.
    pub span: Option<Span>,
}

impl RunError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RunError { kind, message: message.into(), graph: None, node: None, span: None }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Attaches the failing node unless an inner node (in a region) already claimed the error.
    pub fn at_node(mut self, graph: &str, node: String, span: Span) -> Self {
        if self.node.is_none() {
            self.graph = Some(graph.to_string());
            self.node = Some(node);
            self.span = (span != Span::default()).then_some(span);
        }
        self
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.graph, &self.node) {
            (Some(g), Some(n)) => write!(f, "in @{g}, {n}: {}", self.message),
            (Some(g), None) => write!(f, "in @{g}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for RunError {}
