//! The rendezvous of one step: sends publish tensors under keys, recvs take them. Keys inside
//! loops carry the iteration path, so each iteration's transfer is its own.

use crate::error::RunError;
use crate::value::RtValue;
use crate::wait::{lock, WaitCtx};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};

#[derive(Debug, Default)]
pub(crate) struct Rendezvous {
    table: Mutex<HashMap<String, RtValue>>,
    arrived: Condvar,
}

impl Rendezvous {
    /// Publishes a value; never blocks.
    pub fn send(&self, key: String, value: RtValue) -> Result<(), RunError> {
        let mut t = lock(&self.table);
        if t.contains_key(&key) {
            return Err(RunError::internal(format!("rendezvous key \"{key}\" was sent twice in one step")));
        }
        t.insert(key, value);
        self.arrived.notify_all();
        Ok(())
    }

    /// Takes the value sent under `key`, waiting for it.
    pub fn recv(&self, ctx: &WaitCtx<'_>, key: &str) -> Result<RtValue, RunError> {
        ctx.block(
            &self.table,
            &self.arrived,
            |_| format!("recv of rendezvous key \"{key}\" is blocked: nothing was sent under that key yet"),
            |t| t.remove(key).map(Ok),
        )
    }
}
