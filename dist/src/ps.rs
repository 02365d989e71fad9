//! A parameter server: one ps task's variables in a session of the runtime, read by the
//! workers' pulls and updated by their pushes, combined as the sync mode says.
//!
//! Workers other than the chief join once the chief has (it starts the training). Workers
//! number their steps from 1. A worker's first pull or push of a step *enters* it:
//! in `sync` and `backup:K` that waits until the round its previous step joined has been
//! applied, then joins the next round (so a straggler whose update was dropped joins the
//! current round, as SyncReplicasOptimizer's tokens make it); in `ssp:S` it waits until no
//! other running worker is more than S steps behind. A worker's push is complete when every
//! tensor the program expects has come; then `async` and `ssp` apply it at once, and the
//! round modes add it to its round, which is applied, with each tensor averaged over the
//! round's updates in worker order, once it has `n - K` of them (fewer when workers have
//! finished). An update for a round already applied is dropped. Every wait is bounded by the
//! peer timeout: a worker that never comes is an error naming what was awaited, not a hang.

use crate::split::{input_name, PsProgram, APPLY};
use crate::wire::{Sender, SyncMode};
use graphc_ir::{DType, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a ps task runs.
#[derive(Clone, Debug)]
pub struct PsOptions {
    pub workers: u32,
    pub sync: SyncMode,
    /// The longest any wait for another task lasts.
    pub peer_timeout: Duration,
    /// The cluster's checkpoint index (`--checkpoint`): shards are written beside it, and a
    /// task starting where it exists restores its shard from it.
    pub checkpoint: Option<PathBuf>,
    /// The ps tasks in the cluster.
    pub tasks: usize,
    /// `--log`: a JSON line per update applied (`update`, `workers` averaged, `dropped` so far,
    /// `time_s`).
    pub log: Option<PathBuf>,
}

/// One worker's tensors for one step, by key.
type Update = BTreeMap<String, Arc<Tensor>>;

/// A worker's update for its step, waiting for its round.
#[derive(Debug)]
struct Pending {
    worker: u32,
    step: u64,
    update: Update,
}

#[derive(Debug, Default)]
struct Progress {
    /// Rounds applied (round modes), or updates applied (async, ssp).
    applied: u64,
    /// Per worker: the run ([`Sender::incarnation`]) whose requests count, 0 until one comes.
    incarnation: Vec<u64>,
    /// Per worker: the step it is in and the round it joined.
    entered: Vec<Option<(u64, u64)>>,
    /// Per worker: its last step whose update came.
    pushed: Vec<u64>,
    /// Per worker: its last step whose update is in the variables (applied, or dropped as a
    /// straggler's), which a checkpoint records with them.
    settled: Vec<u64>,
    /// Per worker: the round of its last update (round modes); its next step waits for it.
    last_round: Vec<u64>,
    done: Vec<bool>,
    /// Complete updates waiting for their round, by round.
    rounds: BTreeMap<u64, Vec<Pending>>,
    /// Updates dropped as stragglers'.
    dropped: u64,
    /// Pushes of an update the task had already (a call retried after its reply was lost).
    repeated: u64,
    /// An apply or a worker's step failed: every later request gets this.
    failed: Option<String>,
    /// The step of the newest shard written.
    saved: Option<u64>,
    /// When a worker last called (None: since the task started).
    last_call: Option<Instant>,
    /// The chief has said hello (or the variables come from its checkpoint): the other
    /// workers' steps wait for it, as TensorFlow's wait for the chief's session.
    chief_started: bool,
    /// The chief is done and will ask for the final checkpoint, which the task serves before
    /// it stops.
    final_checkpoint: bool,
}

/// A ps task's state; the gRPC service in [`crate::service`] calls into it.
#[derive(Debug)]
pub struct ParameterServer {
    pub index: usize,
    session: Session,
    program: PsProgram,
    options: PsOptions,
    progress: Mutex<Progress>,
    changed: Condvar,
    /// The checkpoint step the variables were restored from.
    pub restored: Option<u64>,
    log: Mutex<Option<std::io::LineWriter<std::fs::File>>>,
    started: Instant,
}

impl ParameterServer {
    /// The task's session over its program (variables initialized from their `init`).
    pub fn new(index: usize, program: PsProgram, options: PsOptions, session: SessionOptions) -> Result<Self, String> {
        if options.workers == 0 {
            return Err("a ps task needs at least one worker".into());
        }
        if let SyncMode::Backup(k) = options.sync {
            if k >= options.workers {
                return Err(format!(
                    "--sync backup:{k}: with {} workers a round would need no update; K is below the number of workers",
                    options.workers
                ));
            }
        }
        let session = Session::new(program.module.clone(), session).map_err(|e| e.to_string())?;
        let n = options.workers as usize;
        let restored = match &options.checkpoint {
            Some(path) => crate::checkpoint::restore_shard(&session, path, index, options.tasks, n)?,
            None => None,
        };
        // A line at a time, so a task killed loses none it logged; a task restored from the
        // checkpoint goes on with its earlier run's log.
        let log = match &options.log {
            Some(path) => {
                let opened = graphc_runtime::fsutil::open_regular_for_writing(path, restored.is_some());
                Some(std::io::LineWriter::new(opened.map_err(|e| format!("--log {}: {e}", path.display()))?))
            }
            None => None,
        };
        // Restored, the shard holds each worker's updates up to the step the index records for
        // it: a worker restarted later takes up after that step, and a worker further on goes
        // on with its next update (taken, not mistaken for a retry).
        let settled = restored.as_ref().map_or_else(|| vec![0; n], |r| r.settled.clone());
        let restored = restored.map(|r| r.step);
        let saved = restored;
        let progress = Progress {
            incarnation: vec![0; n],
            entered: vec![None; n],
            pushed: settled.clone(),
            settled,
            last_round: vec![0; n],
            done: vec![false; n],
            saved,
            chief_started: restored.is_some(),
            ..Progress::default()
        };
        Ok(ParameterServer {
            index,
            session,
            program,
            options,
            progress: Mutex::new(progress),
            changed: Condvar::new(),
            restored,
            log: Mutex::new(log),
            started: Instant::now(),
        })
    }

    pub fn program(&self) -> &PsProgram {
        &self.program
    }

    pub fn options(&self) -> &PsOptions {
        &self.options
    }

    /// The session holding the variables (for checkpoints).
    pub fn session(&self) -> &Session {
        &self.session
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, for a worker's call (which [`ParameterServer::idle`] counts from).
    fn call(&self) -> MutexGuard<'_, Progress> {
        let mut p = self.lock();
        p.last_call = Some(Instant::now());
        p
    }

    /// Why this task should stop waiting: some worker has not said it is done (or the chief
    /// has not asked for the final checkpoint it announced), and no worker has called for the
    /// peer timeout (a worker killed and never restarted).
    pub fn idle(&self) -> Option<String> {
        let p = self.lock();
        let quiet = p.last_call.unwrap_or(self.started).elapsed();
        if quiet < self.options.peer_timeout {
            return None;
        }
        let missing: Vec<usize> = (0..p.done.len()).filter(|&w| !p.done[w]).collect();
        let timeout = self.options.peer_timeout;
        if !missing.is_empty() {
            Some(format!(
                "ps task {}: no worker called for {timeout:?}, and workers {missing:?} have not said they are done",
                self.index
            ))
        } else if p.final_checkpoint {
            Some(format!(
                "ps task {}: the chief said it would ask for the final checkpoint, and no call came for {timeout:?}",
                self.index
            ))
        } else {
            None
        }
    }

    /// Whether the task's work is over: every worker is done, and the final checkpoint the
    /// chief announced is written.
    pub fn finished(&self) -> bool {
        let p = self.lock();
        p.done.iter().all(|&d| d) && !p.final_checkpoint
    }

    /// Stops the training with `error` (every later request gets it).
    pub fn give_up(&self, error: String) {
        let mut p = self.lock();
        p.failed.get_or_insert(error);
        self.changed.notify_all();
    }

    fn check_worker(&self, worker: u32) -> Result<(), String> {
        if worker >= self.options.workers {
            return Err(format!("worker {worker} is not in the cluster ({} workers)", self.options.workers));
        }
        Ok(())
    }

    /// Whether `from` is the worker's current run: a request left in flight by an earlier run
    /// of the worker (killed and started again since) is refused, so it can change nothing
    /// here. A task that restarted since the worker's hello takes the first run it hears from.
    fn current(&self, p: &mut Progress, from: Sender) -> Result<(), String> {
        let known = &mut p.incarnation[from.worker as usize];
        if *known == 0 {
            *known = from.incarnation;
        }
        if *known != from.incarnation {
            return Err(format!(
                "worker {}'s request for step {} is from an earlier run of it, which has restarted since",
                from.worker, from.step
            ));
        }
        Ok(())
    }

    /// Waits on `p` until `ready` holds, the deadline passes (an error saying what was
    /// awaited), or an apply fails.
    fn wait<'a>(
        &self,
        mut p: MutexGuard<'a, Progress>,
        ready: impl Fn(&Progress) -> bool,
        what: impl Fn(&Progress) -> String,
    ) -> Result<MutexGuard<'a, Progress>, String> {
        let deadline = Instant::now() + self.options.peer_timeout;
        loop {
            if let Some(e) = &p.failed {
                return Err(e.clone());
            }
            if ready(&p) {
                return Ok(p);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "ps task {}: timed out after {:?} waiting for {}",
                    self.index,
                    self.options.peer_timeout,
                    what(&p)
                ));
            }
            p = self.changed.wait_timeout(p, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Worker `from.worker` enters step `from.step` (see the module's header); returns the
    /// guard.
    fn enter(&self, from: Sender) -> Result<MutexGuard<'_, Progress>, String> {
        let (w, s) = (from.worker, from.step);
        self.check_worker(w)?;
        let mut p = self.call();
        if let Some(e) = &p.failed {
            return Err(e.clone());
        }
        self.current(&mut p, from)?;
        let i = w as usize;
        match p.entered[i] {
            Some((step, _)) if step == s => return Ok(p),
            Some((step, _)) if step > s => return Err(format!("worker {w} is at step {step}; step {s} is past")),
            _ => {}
        }
        let mut p = match self.options.sync {
            SyncMode::Async => p,
            SyncMode::Sync | SyncMode::Backup(_) => {
                let joined = p.last_round[i];
                self.wait(
                    p,
                    |p| p.applied >= joined,
                    |p| {
                        format!(
                            "round {joined} to be applied (it has {} of its updates)",
                            p.rounds.get(&joined).map_or(0, Vec::len)
                        )
                    },
                )?
            }
            SyncMode::Ssp(bound) => {
                let floor = s.saturating_sub(bound.saturating_add(1));
                let behind = move |p: &Progress| {
                    (0..p.done.len()).filter(|&v| v != i && !p.done[v] && p.pushed[v] < floor).collect::<Vec<_>>()
                };
                self.wait(
                    p,
                    |p| behind(p).is_empty(),
                    |p| format!("workers {:?} to finish step {floor} (ssp:{bound}, worker {w} at step {s})", behind(p)),
                )?
            }
        };
        // The worker may have restarted while this request waited.
        self.current(&mut p, from)?;
        let round = p.applied + 1;
        p.entered[i] = Some((s, round));
        // The chief is training (this task may have restarted since its hello).
        p.chief_started |= i == 0;
        Ok(p)
    }

    /// Worker `w`'s run `incarnation` (re)joins: whatever an earlier run left unfinished is
    /// forgotten (and its requests still in flight are refused), and it takes up after its
    /// last step whose update this task has, which is returned. The other workers wait for
    /// the chief to join first (the chief starts the training).
    pub fn hello(&self, w: u32, incarnation: u64) -> Result<u64, String> {
        self.check_worker(w)?;
        let mut p = self.call();
        if w == 0 {
            p.chief_started = true;
        } else {
            p = self.wait(p, |p| p.chief_started, |_| "the chief (worker 0) to start the training".to_string())?;
        }
        let i = w as usize;
        p.incarnation[i] = incarnation;
        // Its round stays: a restarted worker never joins the round holding its last update.
        p.entered[i] = None;
        p.done[i] = false;
        self.changed.notify_all();
        Ok(p.pushed[i])
    }

    /// Worker `w`'s step failed with `error`: every task's training stops with it.
    pub fn abort(&self, w: u32, error: &str) -> Result<(), String> {
        self.check_worker(w)?;
        let mut p = self.call();
        if p.failed.is_none() {
            p.failed = Some(format!("worker {w} failed: {error}"));
        }
        self.changed.notify_all();
        Ok(())
    }

    /// Why the training failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Saves this task's shard of the checkpoint of the chief's step `step` (between applies);
    /// returns it. The final checkpoint (`last`) holds every worker's last update: it waits
    /// for the workers still running, and while they are, returns None after a while for the
    /// chief to ask again (each call stays short, so a task that stops answering is found).
    pub fn save(&self, step: u64, last: bool) -> Result<Option<crate::checkpoint::Shard>, String> {
        let path = self.options.checkpoint.as_ref().ok_or_else(|| {
            format!("ps task {} was started without --checkpoint, so it cannot save its shard", self.index)
        })?;
        if last {
            let all_done = |p: &Progress| p.done.iter().all(|&d| d);
            // Not a worker's call for [`Self::idle`]: a worker gone for good while the chief
            // asks and asks is still found.
            let mut p = self.lock();
            let deadline = Instant::now() + self.options.peer_timeout / 2;
            while !all_done(&p) && p.failed.is_none() {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(None);
                }
                p = self.changed.wait_timeout(p, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        // The checkpoint of a step holds at least that step's updates: in the round modes, the
        // chief's last round is applied first (the chief may be a step or two further by now,
        // and those rounds may be in too: a restore then re-applies them once).
        let p = self.call();
        if let Some(e) = &p.failed {
            return Err(format!("no checkpoint of a failed training: {e}"));
        }
        let joined = p.last_round[0];
        let mut p = match self.options.sync {
            SyncMode::Sync | SyncMode::Backup(_) => self.wait(
                p,
                |p| p.applied >= joined,
                |_| format!("round {joined} to be applied before the checkpoint of step {step}"),
            )?,
            SyncMode::Async | SyncMode::Ssp(_) => p,
        };
        let written = crate::checkpoint::write_shard(&self.session, path, self.index, step, p.saved)?;
        p.saved = Some(step);
        if last {
            p.final_checkpoint = false;
        }
        Ok(Some(crate::checkpoint::Shard { path: written, settled: p.settled.clone() }))
    }

    /// A worker's reads of `keys` for its step, in their order.
    pub fn pull(&self, from: Sender, keys: &[String]) -> Result<Vec<Arc<Tensor>>, String> {
        let names = keys
            .iter()
            .map(|key| {
                self.program.reads.get(key).ok_or_else(|| format!("ps task {} serves no read '{key}'", self.index))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let _entered = self.enter(from)?;
        names
            .into_iter()
            .map(|name| {
                let var = self.session.state().variable(name).map_err(|e| e.to_string())?;
                var.read().map_err(|e| e.to_string())
            })
            .collect()
    }

    /// The type a pushed key must have.
    pub fn push_type(&self, key: &str) -> Result<&graphc_ir::TensorType, String> {
        self.program.pushes.get(key).ok_or_else(|| format!("ps task {} expects no push '{key}'", self.index))
    }

    /// A worker's tensors for its step (its whole update for this task). Returns whether they
    /// count (false: their round was applied without them).
    pub fn push(&self, from: Sender, tensors: Vec<(String, Tensor)>) -> Result<bool, String> {
        let (w, s) = (from.worker, from.step);
        let mut update = Update::new();
        for (key, t) in tensors {
            self.push_type(&key)?;
            if update.insert(key.clone(), Arc::new(t)).is_some() {
                return Err(format!("worker {w} pushed '{key}' twice in step {s}"));
            }
        }
        if update.len() != self.program.pushes.len() {
            return Err(format!(
                "worker {w}'s update for step {s} has {} of the {} tensors this task expects; an update comes whole",
                update.len(),
                self.program.pushes.len()
            ));
        }
        {
            self.check_worker(w)?;
            let mut p = self.call();
            self.current(&mut p, from)?;
            // A call retried after its reply was lost: the update is in already.
            if s <= p.pushed[w as usize] {
                p.repeated += 1;
                return Ok(true);
            }
        }
        let mut p = self.enter(from)?;
        let round = p.entered[w as usize].map_or(0, |(_, r)| r);
        p.pushed[w as usize] = s;
        p.last_round[w as usize] = round;
        let counted = match self.options.sync {
            SyncMode::Async | SyncMode::Ssp(_) => {
                let applied = self.apply(&[Pending { worker: w, step: s, update }]);
                self.settle(&mut p, applied, 1)?;
                p.settled[w as usize] = s;
                true
            }
            SyncMode::Sync | SyncMode::Backup(_) if round <= p.applied => {
                p.dropped += 1;
                p.settled[w as usize] = s;
                false
            }
            SyncMode::Sync | SyncMode::Backup(_) => {
                p.rounds.entry(round).or_default().push(Pending { worker: w, step: s, update });
                self.close_rounds(&mut p)?;
                true
            }
        };
        self.changed.notify_all();
        Ok(counted)
    }

    /// Worker `w` has run its last step (the chief saying whether it will ask for the final
    /// checkpoint next); returns whether the task's work is over ([`Self::finished`]).
    pub fn done(&self, w: u32, final_checkpoint: bool) -> Result<bool, String> {
        self.check_worker(w)?;
        {
            let mut p = self.call();
            p.done[w as usize] = true;
            p.final_checkpoint |= w == 0 && final_checkpoint && self.options.checkpoint.is_some();
            if matches!(self.options.sync, SyncMode::Sync | SyncMode::Backup(_)) {
                self.close_rounds(&mut p)?;
            }
            self.changed.notify_all();
        }
        Ok(self.finished())
    }

    /// Writes out what the log holds.
    pub fn flush_log(&self) -> Result<(), String> {
        match self.log.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(f) => f.flush().map_err(|e| format!("ps task {}: cannot write its log: {e}", self.index)),
            None => Ok(()),
        }
    }

    /// Updates dropped as stragglers' so far, and pushes of updates the task had already.
    pub fn dropped(&self) -> (u64, u64) {
        let p = self.lock();
        (p.dropped, p.repeated)
    }

    /// Applies the next round while it has the updates it needs.
    fn close_rounds(&self, p: &mut Progress) -> Result<(), String> {
        let backups = match self.options.sync {
            SyncMode::Backup(k) => k as usize,
            _ => 0,
        };
        let running = p.done.iter().filter(|&&d| !d).count();
        loop {
            let next = p.applied + 1;
            let Some(round) = p.rounds.get(&next) else { return Ok(()) };
            // Workers that finished after joining this round still count for it.
            let finished_in = round.iter().filter(|u| p.done[u.worker as usize]).count();
            let need = (self.options.workers as usize - backups).min(running + finished_in).max(1);
            if round.len() < need {
                return Ok(());
            }
            let mut updates = p.rounds.remove(&next).expect("present above");
            updates.sort_by_key(|u| u.worker);
            let applied = self.apply(&updates);
            self.settle(p, applied, updates.len())?;
            for u in &updates {
                let settled = &mut p.settled[u.worker as usize];
                *settled = (*settled).max(u.step);
            }
        }
    }

    /// Counts an apply of `workers` updates, or records its failure.
    fn settle(&self, p: &mut Progress, applied: Result<(), String>, workers: usize) -> Result<(), String> {
        match applied {
            Ok(()) => {
                p.applied += 1;
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(f) = log.as_mut() {
                    let line = format!(
                        "{{\"update\": {}, \"workers\": {workers}, \"dropped\": {}, \"time_s\": {}}}",
                        p.applied,
                        p.dropped,
                        self.started.elapsed().as_secs_f64()
                    );
                    if let Err(e) = writeln!(f, "{line}") {
                        *log = None;
                        tracing::warn!("ps task {}: cannot write its log ({e}); no more lines", self.index);
                    }
                }
                Ok(())
            }
            Err(e) => {
                let e = format!("ps task {}: applying the updates failed: {e}", self.index);
                p.failed = Some(e.clone());
                self.changed.notify_all();
                Err(e)
            }
        }
    }

    /// Runs `@apply` once with each pushed tensor averaged over `updates`.
    fn apply(&self, updates: &[Pending]) -> Result<(), String> {
        if self.program.pushes.is_empty() {
            return Ok(());
        }
        let mut request = RunRequest::new(APPLY);
        for key in self.program.pushes.keys() {
            let parts: Vec<&Arc<Tensor>> = updates.iter().map(|u| &u.update[key]).collect();
            request = request.feed(input_name(key), mean(&parts)?);
        }
        self.session.run(request).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The mean of tensors of one type: summed in f64 in order, divided by their number (so the
/// mean of equal tensors is each of them exactly); integer and boolean tensors are taken
/// from the first.
fn mean(parts: &[&Arc<Tensor>]) -> Result<Arc<Tensor>, String> {
    let first = parts[0];
    if parts.len() == 1 || !first.dtype().is_float() {
        return Ok(first.clone());
    }
    let mut sum = first.to_f64_vec();
    for t in &parts[1..] {
        for (s, x) in sum.iter_mut().zip(t.to_f64_vec()) {
            *s += x;
        }
    }
    let n = parts.len() as f64;
    let data = match first.dtype() {
        DType::F32 => TensorData::F32(sum.iter().map(|s| (s / n) as f32).collect()),
        _ => TensorData::F64(sum.iter().map(|s| s / n).collect()),
    };
    Tensor::from_data(first.shape(), data).map(Arc::new).ok_or_else(|| "internal error averaging updates".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::split;
    use graphc_ir::TensorType;

    const STEP: &str = r#"graph @step(%g: f32[2]) -> (loss: f32[]) {
  %w = variable {name = "w", init = dense<[1.0, 2.0]> : f32[2]} : var<f32[2]>
  %wv = read %w : f32[2]
  %loss = reduce_sum %wv {axes = [0]} : f32[]
  %lr = constant {value = dense<1.0> : f32[]} : f32[]
  %u = apply_sgd %w, %lr, %g : f32[2]
  %out = identity %loss after(%u) : f32[]
  return %out
}
"#;

    const READ: &str = "ps0/read/w";

    fn server(workers: u32, sync: SyncMode) -> Arc<ParameterServer> {
        server_with(options(workers, sync))
    }

    fn server_with(options: PsOptions) -> Arc<ParameterServer> {
        let program = split(&graphc_ir::parse_module(STEP).unwrap(), "step", 1, crate::split::MIN_SLICE_BYTES)
            .unwrap()
            .tasks
            .remove(0);
        Arc::new(ParameterServer::new(0, program, options, SessionOptions::default()).unwrap())
    }

    /// Worker `w`'s read for step `s` on another thread, checked to be waiting still.
    fn blocked_read(ps: &Arc<ParameterServer>, w: u32, s: u64, why: &str) -> std::thread::JoinHandle<Vec<f64>> {
        let ps = ps.clone();
        let waiting = std::thread::spawn(move || read(&ps, w, s));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiting.is_finished(), "{why}");
        waiting
    }

    /// A fresh scratch directory, and async options for `workers` workers with the
    /// checkpoint index `ckpt` in it and the peer timeout `timeout`.
    fn checkpointed(name: &str, workers: u32, timeout: Duration) -> (PathBuf, PsOptions) {
        let dir = std::env::temp_dir().join(format!("graphc-ps-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let options = PsOptions {
            checkpoint: Some(dir.join("ckpt")),
            peer_timeout: timeout,
            ..options(workers, SyncMode::Async)
        };
        (dir, options)
    }

    fn options(workers: u32, sync: SyncMode) -> PsOptions {
        PsOptions { workers, sync, peer_timeout: Duration::from_secs(5), checkpoint: None, tasks: 1, log: None }
    }

    fn grad(v: f32) -> Tensor {
        Tensor::from_f32(vec![v, v], &TensorType::new(DType::F32, vec![2])).unwrap()
    }

    /// Worker `w`'s first run at step `s`.
    fn at(w: u32, s: u64) -> Sender {
        Sender { worker: w, incarnation: 1, step: s }
    }

    fn read(ps: &ParameterServer, w: u32, s: u64) -> Vec<f64> {
        ps.pull(at(w, s), &[READ.into()]).unwrap().remove(0).to_f64_vec()
    }

    fn update(g: f32) -> Vec<(String, Tensor)> {
        vec![("ps0/u0_1".into(), Tensor::scalar_f32(1.0)), ("ps0/u0_2".into(), grad(g))]
    }

    /// A worker's step: read, then push gradient `g` (lr 1 and the constant pushed too).
    fn step(ps: &ParameterServer, w: u32, s: u64, g: f32) -> bool {
        read(ps, w, s);
        ps.push(at(w, s), update(g)).unwrap()
    }

    #[test]
    fn sync_averages_a_round_and_holds_the_next_step() {
        let ps = server(2, SyncMode::Sync);
        assert!(step(&ps, 0, 1, 1.0));
        // Worker 0's step 2 waits for the round, which worker 1 completes.
        let waiting = blocked_read(&ps, 0, 2, "step 2 went ahead of the round");
        assert!(step(&ps, 1, 1, 3.0));
        // w - mean(1, 3) = w - 2.
        assert_eq!(waiting.join().unwrap(), [-1.0, 0.0]);
    }

    #[test]
    fn backup_drops_the_straggler() {
        let ps = server(2, SyncMode::Backup(1));
        read(&ps, 1, 1);
        assert!(step(&ps, 0, 1, 1.0));
        assert_eq!(read(&ps, 0, 2), [0.0, 1.0]);
        // Worker 1's update for the round already applied is dropped; it joins the next one.
        assert!(!step(&ps, 1, 1, 5.0));
        assert_eq!(ps.dropped(), (1, 0));
        assert_eq!(read(&ps, 1, 2), [0.0, 1.0]);
    }

    #[test]
    fn async_applies_each_update_and_ssp_bounds_the_lead() {
        let ps = server(2, SyncMode::Async);
        assert!(step(&ps, 0, 1, 1.0));
        assert!(step(&ps, 0, 2, 1.0));
        assert_eq!(read(&ps, 1, 1), [-1.0, 0.0]);

        let ps = server(2, SyncMode::Ssp(1));
        assert!(step(&ps, 0, 1, 1.0));
        assert!(step(&ps, 0, 2, 1.0));
        // Step 3 would be 2 ahead of worker 1, which has finished none.
        let waiting = blocked_read(&ps, 0, 3, "worker 0 ran 2 steps ahead");
        assert!(step(&ps, 1, 1, 0.0));
        waiting.join().unwrap();
    }

    #[test]
    fn a_finished_worker_does_not_hold_the_rounds() {
        let ps = server(2, SyncMode::Sync);
        assert!(!ps.done(1, false).unwrap());
        assert!(step(&ps, 0, 1, 1.0));
        assert_eq!(read(&ps, 0, 2), [0.0, 1.0]);
        assert!(ps.done(0, false).unwrap());
        // A worker done right after its last push leaves the round to the others.
        let ps = server(2, SyncMode::Sync);
        assert!(step(&ps, 0, 1, 1.0));
        assert!(!ps.done(0, false).unwrap());
        assert!(step(&ps, 1, 1, 3.0));
        assert_eq!(ps.dropped(), (0, 0));
        assert_eq!(read(&ps, 1, 2), [-1.0, 0.0]);
    }

    #[test]
    fn a_failed_worker_stops_the_others_and_a_restarted_one_takes_up_after_its_last_update() {
        let ps = server(2, SyncMode::Async);
        assert!(step(&ps, 1, 1, 1.0));
        assert!(step(&ps, 1, 2, 1.0));
        read(&ps, 1, 3);
        // A worker other than the chief joins once the chief has.
        let ps2 = ps.clone();
        let joining = std::thread::spawn(move || ps2.hello(1, 1));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!joining.is_finished(), "worker 1 waits for the chief");
        assert_eq!(ps.hello(0, 1).unwrap(), 0);
        assert_eq!(joining.join().unwrap().unwrap(), 2);
        assert!(step(&ps, 1, 3, 1.0));
        ps.abort(1, "kernel failed").unwrap();
        assert!(ps.abort(7, "x").is_err());
        let e = ps.pull(at(0, 1), &[READ.into()]).unwrap_err();
        assert_eq!(e, "worker 1 failed: kernel failed");
    }

    #[test]
    fn a_restarted_worker_never_fills_its_round_twice_and_a_retried_push_counts_once() {
        let ps = server(2, SyncMode::Sync);
        // Round 1 holds worker 1's update and waits for worker 0's; worker 1 restarts.
        assert!(step(&ps, 1, 1, 3.0));
        ps.hello(0, 1).unwrap();
        assert_eq!(ps.hello(1, 1).unwrap(), 1);
        let waiting = blocked_read(&ps, 1, 2, "the restarted worker joined the round holding its update");
        assert!(step(&ps, 0, 1, 1.0));
        assert_eq!(waiting.join().unwrap(), [-1.0, 0.0]);
        // Worker 0's step 1 again (its reply lost): nothing is applied twice.
        assert!(step(&ps, 0, 1, 1.0));
        assert_eq!(read(&ps, 0, 2), [-1.0, 0.0]);
        assert_eq!(ps.dropped(), (0, 1));
    }

    #[test]
    fn requests_an_earlier_run_of_a_restarted_worker_left_in_flight_change_nothing() {
        let ps = server(2, SyncMode::Sync);
        ps.hello(0, 1).unwrap();
        // Worker 1's first run pushes step 1, and its read for step 2 waits for the round.
        assert!(step(&ps, 1, 1, 3.0));
        let ps2 = ps.clone();
        let stale = std::thread::spawn(move || ps2.pull(at(1, 2), &[READ.into()]));
        std::thread::sleep(Duration::from_millis(50));
        // It is killed and started again: the second run takes up after step 1.
        assert_eq!(ps.hello(1, 2).unwrap(), 1);
        let again = |s| Sender { worker: 1, incarnation: 2, step: s };
        assert!(step(&ps, 0, 1, 1.0));
        let e = stale.join().unwrap().unwrap_err();
        assert!(e.contains("from an earlier run of it"), "{e}");
        // The first run's push for step 2, come late, is refused; the second run's counts.
        assert!(ps.push(at(1, 2), update(100.0)).unwrap_err().contains("earlier run"));
        assert_eq!(ps.pull(again(2), &[READ.into()]).unwrap().remove(0).to_f64_vec(), [-1.0, 0.0]);
        assert!(ps.push(again(2), update(1.0)).unwrap());
        assert!(step(&ps, 0, 2, 1.0));
        assert_eq!(read(&ps, 0, 3), [-2.0, -1.0]);
    }

    #[test]
    fn a_task_whose_workers_stop_calling_gives_up_after_the_peer_timeout() {
        let ps = server_with(PsOptions { peer_timeout: Duration::from_millis(30), ..options(2, SyncMode::Async) });
        assert!(step(&ps, 0, 1, 1.0));
        assert_eq!(ps.idle(), None);
        ps.done(0, false).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        let why = ps.idle().unwrap();
        assert!(why.contains("workers [1] have not said they are done"), "{why}");
        ps.give_up(why);
        assert!(ps.pull(at(1, 1), &[READ.into()]).unwrap_err().contains("no worker called"));
    }

    #[test]
    fn shards_restore_into_a_new_task() {
        let (dir, with) = checkpointed("shard", 1, Duration::from_secs(5));
        let index = dir.join("ckpt");
        let ps = server_with(with.clone());
        assert_eq!(ps.restored, None);
        assert!(step(&ps, 0, 1, 1.0));
        let shard = ps.save(1, false).unwrap().unwrap();
        assert_eq!(shard.settled, [1]);
        crate::checkpoint::write_index(&index, 1, &[shard], &Default::default()).unwrap();
        assert!(step(&ps, 0, 2, 1.0));
        let again = server_with(with);
        assert_eq!(again.restored, Some(1));
        assert_eq!(again.hello(0, 1).unwrap(), 1);
        assert_eq!(read(&again, 0, 2), [0.0, 1.0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_restored_task_takes_a_lagging_workers_next_update_for_what_it_is() {
        let (dir, with) = checkpointed("lag", 2, Duration::from_secs(5));
        let index = dir.join("ckpt");
        let ps = server_with(with.clone());
        for s in 1..=3 {
            assert!(step(&ps, 0, s, 1.0));
        }
        assert!(step(&ps, 1, 1, 1.0));
        // The chief's checkpoint of its step 3 holds worker 1's updates up to its step 1.
        let shard = ps.save(3, false).unwrap().unwrap();
        assert_eq!(shard.settled, [3, 1]);
        crate::checkpoint::write_index(&index, 3, &[shard], &Default::default()).unwrap();
        // Updates after it are lost with the task; restored, it takes worker 1's step 2 (not
        // a retry of an update it has).
        assert!(step(&ps, 1, 2, 1.0));
        let again = server_with(with);
        assert_eq!(read(&again, 0, 4), [-3.0, -2.0]);
        assert!(step(&again, 1, 2, 1.0));
        assert_eq!(read(&again, 0, 4), [-4.0, -3.0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_final_checkpoint_waits_for_every_workers_last_update() {
        let (dir, with) = checkpointed("final", 2, Duration::from_millis(200));
        let ps = server_with(with);
        for s in 1..=2 {
            assert!(step(&ps, 0, s, 1.0));
        }
        assert!(!ps.done(0, true).unwrap());
        // Worker 1 is still training: the chief is asked to come again.
        assert_eq!(ps.save(2, true).unwrap(), None);
        for s in 1..=3 {
            assert!(step(&ps, 1, s, 1.0));
        }
        // Every worker done, the task still waits for the checkpoint.
        assert!(!ps.done(1, false).unwrap());
        assert_eq!(ps.idle(), None);
        let shard = ps.save(2, true).unwrap().unwrap();
        assert_eq!(shard.settled, [2, 3]);
        assert!(ps.finished());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_worker_gone_for_good_is_found_while_the_chief_waits_for_the_final_checkpoint() {
        let (dir, with) = checkpointed("gone", 2, Duration::from_millis(100));
        let ps = server_with(with);
        assert!(step(&ps, 0, 1, 1.0));
        assert!(!ps.done(0, true).unwrap());
        // Worker 1 never comes; the chief's asking does not keep the task waiting.
        let start = Instant::now();
        let why = loop {
            assert_eq!(ps.save(1, true).unwrap(), None);
            if let Some(why) = ps.idle() {
                break why;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "the task waits on");
        };
        assert!(why.contains("workers [1] have not said they are done"), "{why}");
        ps.give_up(why);
        assert!(ps.save(1, true).unwrap_err().contains("no checkpoint of a failed training"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_requests_are_errors() {
        let ps = server(1, SyncMode::Sync);
        assert!(ps.pull(at(3, 1), &[READ.into()]).unwrap_err().contains("not in the cluster"));
        assert!(ps.pull(at(0, 1), &["ps0/read/v".into()]).unwrap_err().contains("no read"));
        assert!(ps.push(at(0, 1), vec![("ps0/u9_9".into(), grad(1.0))]).unwrap_err().contains("no push"));
        let twice = vec![("ps0/u0_2".into(), grad(1.0)), ("ps0/u0_2".into(), grad(1.0))];
        assert!(ps.push(at(0, 1), twice).unwrap_err().contains("twice"));
        assert!(ps.push(at(0, 1), vec![("ps0/u0_2".into(), grad(1.0))]).unwrap_err().contains("comes whole"));
        let ps = server_with(PsOptions { peer_timeout: Duration::from_millis(50), ..options(2, SyncMode::Sync) });
        assert!(step(&ps, 0, 1, 1.0));
        let e = ps.pull(at(0, 2), &[READ.into()]).unwrap_err();
        assert!(e.contains("timed out") && e.contains("round 1"), "{e}");
    }
}
