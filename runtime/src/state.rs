//! Session state: variables and queues, created from the module's declarations and shared by
//! every run (and every thread) of the session.
//!
//! A variable's value is an `Arc<Tensor>` replaced on each write, so a checkpoint snapshot is a
//! copy of pointers: it costs the running steps nothing and sees each variable as of one
//! moment. The optimizer updates alone write a value in place, and only when nothing else holds
//! it (no snapshot, no read still live), through [`update_together`].

use crate::error::{ErrorKind, RunError};
use crate::kernels;
use crate::tensor::Tensor;
use crate::wait::{lock, WaitCtx};
use graphc_ir::{Module, Op, TensorType, Type};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockWriteGuard};

/// A variable held by a session.
#[derive(Debug)]
pub struct Variable {
    pub name: String,
    pub ty: TensorType,
    value: RwLock<Option<Arc<Tensor>>>,
}

impl Variable {
    fn new(name: &str, ty: TensorType, init: Option<Tensor>) -> Self {
        Variable { name: name.to_string(), ty, value: RwLock::new(init.map(Arc::new)) }
    }

    /// The current value; an error if the variable was never given one.
    pub fn read(&self) -> Result<Arc<Tensor>, RunError> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone().ok_or_else(|| self.uninitialized())
    }

    /// The current value, `None` when uninitialized.
    pub fn value(&self) -> Option<Arc<Tensor>> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value; `None` makes the variable uninitialized.
    pub fn assign(&self, v: Option<Arc<Tensor>>) -> Result<(), RunError> {
        if let Some(t) = &v {
            self.check_type(t)?;
        }
        *self.value.write().unwrap_or_else(|e| e.into_inner()) = v;
        Ok(())
    }

    /// `v = v + delta` under the write lock, so concurrent adds never lose an update.
    pub fn assign_add(&self, delta: &Tensor) -> Result<Arc<Tensor>, RunError> {
        self.check_type(delta)?;
        let mut slot = self.value.write().unwrap_or_else(|e| e.into_inner());
        let cur = slot.as_ref().ok_or_else(|| self.uninitialized())?;
        let sum = kernels::eval(Op::Add, &Default::default(), &[cur, delta], std::slice::from_ref(&self.ty))
            .map_err(|e| RunError::new(ErrorKind::Kernel, e.0))?;
        let new = Arc::new(sum.into_iter().next().ok_or_else(|| RunError::internal("add gave no result"))?);
        *slot = Some(new.clone());
        Ok(new)
    }

    fn check_type(&self, t: &Tensor) -> Result<(), RunError> {
        if t.ty() != self.ty {
            return Err(RunError::invalid(format!(
                "variable \"{}\" holds {} but was given {}",
                self.name,
                self.ty,
                t.ty()
            )));
        }
        Ok(())
    }

    fn uninitialized(&self) -> RunError {
        RunError::new(
            ErrorKind::Uninitialized,
            format!(
                "variable \"{}\" ({}) is read before it has a value: give it an `init` attribute, assign it first, or restore a checkpoint",
                self.name, self.ty
            ),
        )
    }
}

/// Runs `update` on the values of `vars` (in the order given) with every one write-locked for
/// the whole update, so concurrent reads, updates and snapshots see all of it or none. The
/// locks are taken in the order of the variables' names, the order [`State::snapshot`] takes its
/// read locks, so no two updates, nor an update and a snapshot, wait for each other in a
/// cycle. An uninitialized variable is an error, as reading it is; so is a variable given
/// twice (it cannot be locked twice). `update` may write a value in place
/// (`Arc::make_mut`: in place when nothing else holds it, else on a copy).
pub fn update_together<R>(
    vars: &[&Variable],
    update: impl FnOnce(&mut [&mut Arc<Tensor>]) -> Result<R, RunError>,
) -> Result<R, RunError> {
    for (i, a) in vars.iter().enumerate() {
        if vars[..i].iter().any(|b| std::ptr::eq(*a, *b)) {
            return Err(RunError::invalid(format!("variable \"{}\" is given twice to one update", a.name)));
        }
    }
    let mut order: Vec<usize> = (0..vars.len()).collect();
    order.sort_by(|&a, &b| vars[a].name.cmp(&vars[b].name));
    let mut guards: Vec<Option<RwLockWriteGuard<'_, Option<Arc<Tensor>>>>> = vars.iter().map(|_| None).collect();
    for i in order {
        guards[i] = Some(vars[i].value.write().unwrap_or_else(|e| e.into_inner()));
    }
    let mut slots = Vec::with_capacity(vars.len());
    for (guard, var) in guards.iter_mut().zip(vars) {
        match guard.as_mut().and_then(|g| g.as_mut()) {
            Some(value) => slots.push(value),
            None => return Err(var.uninitialized()),
        }
    }
    update(&mut slots)
}

/// A FIFO queue of tensor tuples held by a session.
#[derive(Debug)]
pub struct Queue {
    pub name: String,
    pub types: Vec<TensorType>,
    pub capacity: usize,
    state: Mutex<QueueState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    items: VecDeque<Vec<Arc<Tensor>>>,
    closed: bool,
}

impl Queue {
    fn new(name: &str, types: Vec<TensorType>, capacity: usize) -> Self {
        Queue { name: name.to_string(), types, capacity, state: Mutex::default(), changed: Condvar::new() }
    }

    /// Appends a tuple, blocking while the queue is full.
    pub fn enqueue(&self, ctx: &WaitCtx<'_>, item: Vec<Arc<Tensor>>) -> Result<(), RunError> {
        let types: Vec<TensorType> = item.iter().map(|t| t.ty()).collect();
        if types != self.types {
            return Err(RunError::invalid(format!(
                "queue \"{}\" holds ({}) but was given ({})",
                self.name,
                list(&self.types),
                list(&types)
            )));
        }
        let mut item = Some(item);
        ctx.block(
            &self.state,
            &self.changed,
            |_| format!("enqueue to queue \"{}\" is blocked: it is full ({} elements)", self.name, self.capacity),
            |s| {
                if s.closed {
                    return Some(Err(self.closed_error("enqueue to")));
                }
                if s.items.len() < self.capacity {
                    s.items.push_back(item.take().expect("an item is enqueued once"));
                    self.changed.notify_all();
                    return Some(Ok(()));
                }
                None
            },
        )
    }

    /// Removes the oldest tuple, blocking while the queue is empty and open.
    pub fn dequeue(&self, ctx: &WaitCtx<'_>) -> Result<Vec<Arc<Tensor>>, RunError> {
        ctx.block(
            &self.state,
            &self.changed,
            |_| format!("dequeue from queue \"{}\" is blocked: it is empty", self.name),
            |s| {
                if let Some(item) = s.items.pop_front() {
                    self.changed.notify_all();
                    return Some(Ok(item));
                }
                s.closed.then(|| Err(self.closed_error("dequeue from")))
            },
        )
    }

    /// Closes the queue and wakes every waiter.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.changed.notify_all();
    }

    pub fn len(&self) -> usize {
        lock(&self.state).items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    fn closed_error(&self, what: &str) -> RunError {
        let state = if what == "enqueue to" { "closed" } else { "closed and empty" };
        RunError::new(ErrorKind::QueueClosed, format!("{what} queue \"{}\" failed: the queue is {state}", self.name))
    }
}

fn list(types: &[TensorType]) -> String {
    types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

/// All variables and queues of a session, by name. The maps are fixed when the session is
/// created; the objects in them change.
#[derive(Debug, Default)]
pub struct State {
    pub variables: BTreeMap<String, Arc<Variable>>,
    pub queues: BTreeMap<String, Arc<Queue>>,
}

impl State {
    /// Creates every variable and queue the module declares, variables holding their `init`.
    /// The verifier has checked that all declarations of one name agree.
    /// An `init` larger than `max_bytes` is an error, not an allocation failure.
    pub fn from_module(m: &Module, max_bytes: u64) -> Result<State, RunError> {
        let mut state = State::default();
        for g in &m.graphs {
            for n in g.walk() {
                let nd = &g.nodes[n];
                let (Some(name), Some(&res)) = (nd.attrs.str("name"), nd.results.first()) else { continue };
                match (nd.op, &g.values[res].ty) {
                    (Op::Variable, Type::Var(ty)) if !state.variables.contains_key(name) => {
                        crate::limits::check_tensor_size(ty, max_bytes).map_err(|m| {
                            RunError::new(ErrorKind::ResourceExhausted, format!("variable \"{name}\": {m}"))
                        })?;
                        let init = nd.attrs.tensor("init").map(Tensor::from_literal).transpose().map_err(|m| {
                            RunError::new(ErrorKind::ResourceExhausted, format!("variable \"{name}\": {m}"))
                        })?;
                        state.variables.insert(name.to_string(), Arc::new(Variable::new(name, ty.clone(), init)));
                    }
                    (Op::Queue, Type::Queue(types)) if !state.queues.contains_key(name) => {
                        let capacity = nd.attrs.int("capacity").unwrap_or(1).max(1) as usize;
                        state.queues.insert(name.to_string(), Arc::new(Queue::new(name, types.clone(), capacity)));
                    }
                    _ => {}
                }
            }
        }
        Ok(state)
    }

    pub fn variable(&self, name: &str) -> Result<&Arc<Variable>, RunError> {
        self.variables.get(name).ok_or_else(|| RunError::internal(format!("no variable \"{name}\" in the session")))
    }

    pub fn queue(&self, name: &str) -> Result<&Arc<Queue>, RunError> {
        self.queues.get(name).ok_or_else(|| RunError::internal(format!("no queue \"{name}\" in the session")))
    }

    /// Every variable's value at one moment: all read locks are taken before any is released.
    pub fn snapshot(&self) -> Vec<(String, Option<Arc<Tensor>>)> {
        let guards: Vec<_> =
            self.variables.values().map(|v| (v, v.value.read().unwrap_or_else(|e| e.into_inner()))).collect();
        guards.iter().map(|(v, g)| (v.name.clone(), (**g).clone())).collect()
    }
}
