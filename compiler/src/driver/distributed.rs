//! `graphc train` and `graphc serve` in a cluster: between-graph replication with parameter
//! servers (crate `graphc-dist`). Every task loads the same file and splits the step graph the
//! same way; a ps task serves its share of the variables until every worker is done, and a
//! worker trains the step graph as `graphc train` does on one machine, its reads and updates
//! of variables going to the ps tasks through the session's rendezvous.

use super::inputs::select_graphs;
use anyhow::{anyhow, bail};
use graphc_dist::service::{self, listen_address};
use graphc_dist::{Auth, Client, Cluster, Exchange, ParameterServer, PsOptions, Split, SyncMode, Token};
use graphc_ir::{Module, SourceFile};
use graphc_runtime::{Session, SessionOptions};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A training across the tasks of a cluster.
#[derive(Debug)]
pub struct Distributed {
    pub cluster: Cluster,
    pub sync: SyncMode,
    /// The token and mutual TLS the tasks know each other by.
    pub auth: Auth,
    /// `--listen`: where a ps task listens instead of loopback at its port.
    pub listen: Option<String>,
    /// The longest a task waits for another.
    pub peer_timeout: Duration,
    /// Variables of at least this many bytes are split row-wise over the ps tasks (0: never).
    pub min_slice_bytes: u64,
}

impl Distributed {
    /// The step graph (as `graphc train` picks it) split over the cluster's ps tasks.
    pub fn split(&self, graph: Option<&str>, file: &SourceFile, module: &Module) -> anyhow::Result<Split> {
        let wanted: Vec<String> = graph.iter().map(|g| g.to_string()).collect();
        let step = select_graphs(&wanted, file, module)?.remove(0);
        graphc_dist::split(module, &step, self.cluster.ps().len(), self.min_slice_bytes)
            .map_err(|e| anyhow!("{}: {e}", file.name))
    }

    /// Ps task `index`: its share of the variables in a session, and where it listens. With
    /// `checkpoint` (the cluster's checkpoint index) it restores its shard from there if the
    /// index exists, and saves its shards beside it; `log` gets a line per update applied.
    pub fn parameter_server(
        &self,
        index: usize,
        mut split: Split,
        checkpoint: Option<&Path>,
        log: Option<&Path>,
    ) -> anyhow::Result<(Arc<ParameterServer>, TcpListener)> {
        let tasks = split.tasks.len();
        let program = split.tasks.swap_remove(index);
        let workers = u32::try_from(self.cluster.workers().len()).map_err(|_| anyhow!("too many workers"))?;
        let options = PsOptions {
            workers,
            sync: self.sync,
            peer_timeout: self.peer_timeout,
            checkpoint: checkpoint.map(Path::to_path_buf),
            tasks,
            log: log.map(Path::to_path_buf),
        };
        let addr =
            listen_address(self.cluster.address(), self.listen.as_deref(), &self.auth).map_err(|e| anyhow!(e))?;
        // The address first: a second process for this task stops here, before it touches the
        // checkpoint or the log.
        let listener = service::claim(addr, &format!("ps task {index}")).map_err(|e| anyhow!(e))?;
        let ps = ParameterServer::new(index, program, options, SessionOptions::default()).map_err(|e| anyhow!(e))?;
        Ok((Arc::new(ps), listener))
    }

    /// Serves `ps` on `listener` until every worker is done.
    pub fn serve(&self, ps: &Arc<ParameterServer>, listener: TcpListener) -> anyhow::Result<()> {
        let served =
            service::serve(ps.clone(), listener, self.auth.clone()).map_err(|e| anyhow!("ps task {}: {e}", ps.index));
        ps.flush_log().map_err(|e| anyhow!(e))?;
        served
    }

    /// Worker `worker`'s claim on its task (see [`service::claim_worker`]), held while it
    /// runs.
    pub fn claim_worker(&self, worker: usize) -> anyhow::Result<Option<TcpListener>> {
        service::claim_worker(self.cluster.address(), worker).map_err(|e| anyhow!(e))
    }

    /// Worker `worker`'s connections to every ps task, each checked to hold the program this
    /// worker split.
    pub fn connect(&self, worker: usize, split: &Split) -> anyhow::Result<Arc<Client>> {
        let workers = self.cluster.workers().len() as u32;
        let hello = split
            .tasks
            .iter()
            .map(|t| graphc_dist::wire::Hello {
                worker: worker as u32,
                workers,
                sync: self.sync.to_string(),
                program: t.fingerprint(),
                // Client::connect draws this run's.
                incarnation: 0,
            })
            .collect();
        let mut client = Client::connect(self.cluster.ps(), worker as u32, &self.auth, hello, self.peer_timeout)
            .map_err(|e| anyhow!("worker {worker}: {e}"))?;
        client.parts = graphc_dist::checkpoint::Parts { rows: split.partitioned.clone(), copies: split.copied.clone() };
        Ok(Arc::new(client))
    }

    /// Routes the session's transfers to the ps tasks; training steps are numbered from
    /// `from + 1`; `exchanges[t]`: what a step reads from and sends to ps task t.
    pub fn attach(session: &mut Session, client: &Arc<Client>, from: u64, exchanges: Vec<Exchange>) {
        session.set_rendezvous(Arc::new(graphc_dist::PsRendezvousFactory::new(client.clone(), from, exchanges)));
    }
}

/// The shared token: `--token-file`'s first line, else `GRAPHC_TOKEN`, else none.
pub fn read_token(file: Option<&Path>) -> anyhow::Result<Token> {
    let secret = match file {
        Some(p) => {
            let text =
                graphc_runtime::fsutil::read_regular(p, "a token file").map_err(|e| anyhow!("--token-file: {e}"))?;
            let text = String::from_utf8(text)
                .map_err(|_| anyhow!("--token-file {}: expected a line of text", p.display()))?;
            let line = text.lines().next().unwrap_or_default().trim().to_string();
            if line.is_empty() {
                bail!("--token-file {}: the file is empty; expected the token on its first line", p.display());
            }
            Some(line)
        }
        None => std::env::var("GRAPHC_TOKEN").ok().filter(|t| !t.trim().is_empty()),
    };
    if let Some(t) = &secret {
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            bail!("the cluster token must be printable ASCII without spaces");
        }
    }
    Ok(Token::new(secret))
}
