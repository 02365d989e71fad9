//! The gRPC side of a ps task (serving [`ParameterServer`]) and of a worker (a client per ps
//! task, and the rendezvous that turns the step graph's sends and recvs of `psN/` keys into
//! pushes and pulls).
//!
//! Every request carries the shared token when the cluster has one; a server refuses one
//! without it (and says so on stderr). With mutual TLS ([`Tls`]) every connection is
//! encrypted and both ends show a certificate of the cluster's CA. Servers listen on loopback
//! unless told otherwise, and another address needs a token or TLS. Streams are checked chunk
//! by chunk ([`Assembly`]).

use crate::ps::ParameterServer;
use crate::split::task_of;
use crate::split::PsProgram;
use crate::tls::Tls;
use crate::wire::{self, Abort, Chunk, Done, Empty, Hello, Pull, Pushed, Received, Save, Saved, Sender, Welcome};
use graphc_runtime::{ErrorKind, LocalRendezvous, Rendezvous, RendezvousFactory, RtValue, RunError, WaitCtx};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status, Streaming};

#[allow(missing_debug_implementations, clippy::all)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/graphc.dist.ParameterServer.rs"));
}
use generated::parameter_server_client::ParameterServerClient;
use generated::parameter_server_server::{ParameterServer as PsRpc, ParameterServerServer};

/// What a call to a ps task may take beyond the peer timeout: the task's own waits end at
/// its peer timeout, and its error about them should reach the worker before the worker gives
/// up on the call.
const REPLY_GRACE: Duration = Duration::from_secs(2);

/// How long a ps task whose work is over waits for its connections to close before it ends
/// anyway (a client that is not reading does not see the server's goodbye).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// HTTP/2 flow-control windows: the default 64 KiB would make a tensor of megabytes wait for
/// a window update every 64 KiB.
const WINDOW: u32 = 16 << 20;

/// The shared secret every request carries (`--token-file`, `GRAPHC_TOKEN`). Debug output
/// does not show it.
#[derive(Clone, Default)]
pub struct Token(Option<Arc<str>>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Token(set)" } else { "Token(none)" })
    }
}

impl Token {
    pub fn new(secret: Option<String>) -> Token {
        Token(secret.map(|s| Arc::from(s.trim())))
    }

    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    fn header(&self) -> Option<String> {
        self.0.as_ref().map(|t| format!("Bearer {t}"))
    }
}

/// How tasks know each other: the shared token, mutual TLS, both or neither (loopback only).
#[derive(Clone, Debug, Default)]
pub struct Auth {
    pub token: Token,
    pub tls: Option<Tls>,
}

impl Auth {
    fn authenticated(&self) -> bool {
        self.token.is_set() || self.tls.is_some()
    }
}

/// Whether `a` and `b` are equal, looking at every byte either way.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn tokio(threads: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("graphc-grpc")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the gRPC runtime: {e}"))
}

struct PsService {
    ps: Arc<ParameterServer>,
    finished: Arc<tokio::sync::Notify>,
}

fn status(e: String) -> Status {
    if e.contains("timed out") {
        Status::deadline_exceeded(e)
    } else {
        Status::failed_precondition(e)
    }
}

/// Runs `f` (which may wait on other workers) off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Status::internal(format!("internal error: {e}")))?.map_err(status)
}

#[tonic::async_trait]
impl PsRpc for PsService {
    async fn hello(&self, request: Request<Hello>) -> Result<Response<Welcome>, Status> {
        let h = request.into_inner();
        let o = self.ps.options();
        let index = self.ps.index;
        if h.workers != o.workers || h.sync != o.sync.to_string() {
            return Err(Status::failed_precondition(format!(
                "ps task {index} trains with {} workers and --sync {}; worker {} came with {} workers and --sync {}",
                o.workers, o.sync, h.worker, h.workers, h.sync
            )));
        }
        if h.program != self.ps.program().fingerprint() {
            return Err(Status::failed_precondition(format!(
                "worker {} split the step into another program for ps task {index} than the ps did: give every task the same file, --graph and cluster",
                h.worker
            )));
        }
        let ps = self.ps.clone();
        let (worker, incarnation) = (h.worker, h.incarnation);
        let resume = blocking(move || ps.hello(worker, incarnation)).await?;
        tracing::info!("ps task {index}: worker {worker} joined, taking up after step {resume}");
        Ok(Response::new(Welcome { ps: index as u32, resume }))
    }

    type PullStream = ReceiverStream<Result<Chunk, Status>>;

    async fn pull(&self, request: Request<Pull>) -> Result<Response<Self::PullStream>, Status> {
        let p = request.into_inner();
        let ps = self.ps.clone();
        let from = Sender { worker: p.worker, incarnation: p.incarnation, step: p.step };
        let keys = p.keys.clone();
        let tensors = blocking(move || ps.pull(from, &keys)).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            for (key, t) in p.keys.iter().zip(&tensors) {
                for c in wire::chunks(key, from, t) {
                    if tx.send(Ok(c)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn push(&self, request: Request<Streaming<Chunk>>) -> Result<Response<Pushed>, Status> {
        let mut stream = request.into_inner();
        let ps = &self.ps;
        let expect = |key: &str| ps.push_type(key).map(|t| Some(t.clone()));
        let mut received = Received::default();
        while let Some(c) = stream.message().await? {
            received.add(c, ps.program().pushes.len(), expect).map_err(Status::invalid_argument)?;
        }
        let tensors = received.finish();
        let from = tensors.first().ok_or_else(|| Status::invalid_argument("an empty push"))?.from;
        let mut update = Vec::with_capacity(tensors.len());
        for a in tensors {
            if a.from != from {
                return Err(Status::invalid_argument("a push mixing workers, runs or steps"));
            }
            let key = a.key.clone();
            update.push((key, a.finish().map_err(Status::invalid_argument)?));
        }
        let ps = self.ps.clone();
        let counted = blocking(move || ps.push(from, update)).await?;
        Ok(Response::new(Pushed { counted }))
    }

    async fn save(&self, request: Request<Save>) -> Result<Response<Saved>, Status> {
        let Save { step, last } = request.into_inner();
        let ps = self.ps.clone();
        let Some(shard) = blocking(move || ps.save(step, last)).await? else {
            return Ok(Response::new(Saved { pending: true, ..Saved::default() }));
        };
        let what = if last { "final shard" } else { "shard" };
        tracing::info!("ps task {}: saved its {what} at step {step} to {}", self.ps.index, shard.path.display());
        if last && self.ps.finished() {
            self.finished.notify_one();
        }
        Ok(Response::new(Saved { file: shard.path.display().to_string(), settled: shard.settled, pending: false }))
    }

    async fn abort(&self, request: Request<Abort>) -> Result<Response<Empty>, Status> {
        let a = request.into_inner();
        tracing::info!("ps task {}: worker {} stopped the training: {}", self.ps.index, a.worker, a.error);
        let ps = self.ps.clone();
        blocking(move || ps.abort(a.worker, &a.error)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn done(&self, request: Request<Done>) -> Result<Response<Empty>, Status> {
        let Done { worker: w, final_checkpoint } = request.into_inner();
        tracing::info!("ps task {}: worker {w} is done", self.ps.index);
        let ps = self.ps.clone();
        if blocking(move || ps.done(w, final_checkpoint)).await? {
            self.finished.notify_one();
        }
        Ok(Response::new(Empty {}))
    }
}

/// The interceptor checking the token. A request without one and a request with another are
/// told apart (to the caller and in this task's log); neither is told the token.
fn authenticate(token: Token, who: String) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |r: Request<()>| {
        let Some(want) = token.header() else { return Ok(r) };
        let got = r.metadata().get("authorization").map(|v| v.as_bytes()).unwrap_or_default();
        if same(got, want.as_bytes()) {
            return Ok(r);
        }
        let from = r.remote_addr().map_or("an unknown address".to_string(), |a| a.to_string());
        let (logged, told) = if got.is_empty() {
            (
                "no token",
                "this task needs the cluster's token, and the request came without one (give every task the same --token-file or GRAPHC_TOKEN)",
            )
        } else {
            (
                "a wrong token",
                "the request's token does not match the cluster's (every task needs the same --token-file or GRAPHC_TOKEN)",
            )
        };
        tracing::warn!("{who}: refused a request from {from}: {logged}");
        Err(Status::unauthenticated(told))
    }
}

/// The port of a cluster address (`host:port`).
fn port_of(address: &str) -> Option<u16> {
    address.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
}

/// Where a server listens: `listen` if given (an IP alone takes `address`'s port), else
/// loopback at `address`'s port. Anything but loopback needs a token or TLS.
pub fn listen_address(address: &str, listen: Option<&str>, auth: &Auth) -> Result<SocketAddr, String> {
    let port = || port_of(address).ok_or_else(|| format!("'{address}' has no port"));
    let addr: SocketAddr = match listen {
        // An IP alone: this task's port in the cluster (one flag serves every rank).
        Some(l) => match (l.parse::<SocketAddr>(), l.parse::<std::net::IpAddr>()) {
            (Ok(a), _) => a,
            (_, Ok(ip)) => SocketAddr::new(ip, port()?),
            _ => return Err(format!("--listen {l}: expected IP or IP:PORT, like 0.0.0.0 or 0.0.0.0:2222")),
        },
        None => SocketAddr::from(([127, 0, 0, 1], port()?)),
    };
    if !addr.ip().is_loopback() && !auth.authenticated() {
        return Err(format!("--listen {addr}: a server reachable from other machines needs authenticated peers: give --token-file PATH or GRAPHC_TOKEN, or --tls-cert, --tls-key and --tls-ca"));
    }
    Ok(addr)
}

/// Claims a task's address before the task does anything else: a listener bound at `addr`,
/// held for the task's life. A second process claiming the same task (on the same host) is
/// refused here, and the running one goes on; so is a task whose port something else holds.
pub fn claim(addr: SocketAddr, task: &str) -> Result<std::net::TcpListener, String> {
    std::net::TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "{task}: {addr} is in use: another process runs {task} (a task is run by one process; the running one goes on) or holds the port"
        ),
        _ => format!("{task}: cannot listen on {addr}: {e}"),
    })
}

/// A worker's claim on its task: its cluster address's port, bound on loopback (a worker
/// serves nothing there). None where the address has no port.
pub fn claim_worker(address: &str, worker: usize) -> Result<Option<std::net::TcpListener>, String> {
    let Some(port) = port_of(address).filter(|&p| p != 0) else { return Ok(None) };
    claim(SocketAddr::from(([127, 0, 0, 1], port)), &format!("worker {worker}")).map(Some)
}

/// Serves `ps` on `listener` (its [`claim`]) until every worker is done; an error if the
/// training failed.
pub fn serve(ps: Arc<ParameterServer>, listener: std::net::TcpListener, auth: Auth) -> Result<(), String> {
    let rt = tokio(2)?;
    let watched = ps.clone();
    let addr = listener.local_addr().map_err(|e| format!("ps task {}: its listener: {e}", ps.index))?;
    rt.block_on(async move {
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let finished = Arc::new(tokio::sync::Notify::new());
        // A worker killed and never restarted would keep this task waiting forever.
        let (quiet, stop) = (ps.clone(), finished.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if let Some(why) = quiet.idle() {
                    quiet.give_up(why);
                    stop.notify_one();
                    return;
                }
            }
        });
        let who = format!("ps task {}", ps.index);
        let service = PsService { ps, finished: finished.clone() };
        let server = ParameterServerServer::new(service).max_decoding_message_size(wire::MAX_MESSAGE);
        let intercepted = InterceptedService::new(server, authenticate(auth.token, who.clone()));
        let router = Server::builder()
            // A worker makes a call per ps key at a time; more is somebody else.
            .concurrency_limit_per_connection(64)
            .initial_stream_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .add_service(intercepted);
        // Once the work is over, the server stops taking calls and ends those in flight; a
        // worker's connection left open (its client idle, not reading) holds it no longer
        // than SHUTDOWN_GRACE.
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            finished.notified().await;
            let _ = stopping.send(true);
        });
        let stop_signal = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|&s| s).await;
        };
        let stop = stop_signal(stopped.clone());
        let served: std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), tonic::transport::Error>> + Send>> =
            match auth.tls {
                // Small pulls and pushes, one after another: Nagle's delay would hold each.
                None => Box::pin(
                    router.serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), stop),
                ),
                Some(tls) => {
                    let (tx, rx) = tokio::sync::mpsc::channel(16);
                    tokio::spawn(async move { tls.accept(listener, tx, who).await });
                    let incoming = tokio_stream::StreamExt::map(ReceiverStream::new(rx), Ok::<_, std::io::Error>);
                    Box::pin(router.serve_with_incoming_shutdown(incoming, stop))
                }
            };
        let grace = async move {
            stop_signal(stopped).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            served = served => served.map_err(|e| format!("serving on {addr}: {e}")),
            () = grace => Ok(()),
        }
    })?;
    watched.failure().map_or(Ok(()), |e| Err(format!("the training failed: {e}")))
}

/// Adds the token to every request a worker makes.
#[derive(Clone)]
struct WithToken(Option<tonic::metadata::AsciiMetadataValue>);

impl tonic::service::Interceptor for WithToken {
    fn call(&mut self, mut r: Request<()>) -> Result<Request<()>, Status> {
        if let Some(h) = &self.0 {
            r.metadata_mut().insert("authorization", h.clone());
        }
        Ok(r)
    }
}

type Authed = InterceptedService<Channel, WithToken>;

/// A worker's connections to the ps tasks. A ps task that cannot be reached (restarting after
/// a failure) is retried until the peer timeout.
pub struct Client {
    rt: tokio::runtime::Runtime,
    ps: Vec<ParameterServerClient<Authed>>,
    addresses: Vec<String>,
    pub worker: u32,
    /// This run of the worker ([`Hello::incarnation`]).
    incarnation: u64,
    /// The last step whose update every ps task has: where a restarted worker takes up (a
    /// task that has a later one ignores it when it comes again).
    pub resume: u64,
    timeout: Duration,
    /// Bytes pulled and pushed so far.
    moved: AtomicU64,
    /// The partitioned variables, as the chief's checkpoint index records them.
    pub parts: crate::checkpoint::Parts,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("ps", &self.addresses).field("worker", &self.worker).finish()
    }
}

/// A number for this run of a worker, other than 0 (which a ps task reads as "none yet") and,
/// all but surely, than any earlier run's: the process, the time and the standard library's
/// per-process random hash keys, hashed.
fn new_incarnation() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now())).max(1)
}

/// Whether a failed call may succeed once the task is back: it could not connect, or the
/// connection broke (the task died mid-reply). Statuses the server gives never retry.
fn unreachable(s: &Status) -> bool {
    use tonic::Code;
    let m = s.message();
    let broken = ["transport", "h2 protocol", "connection", "broken pipe"].iter().any(|w| m.contains(w));
    matches!(s.code(), Code::Unavailable | Code::Cancelled | Code::Unknown) || (s.code() == Code::Internal && broken)
}

/// A failed TLS handshake among `s`'s causes (rustls reports one as invalid data): trying
/// again cannot mend it.
fn tls_failure(s: &Status) -> Option<String> {
    let mut cause = std::error::Error::source(s);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::InvalidData {
                return Some(io.to_string());
            }
        }
        cause = e.source();
    }
    None
}

impl Client {
    /// Connects to every ps task, trying until `timeout` (a ps may still be starting), and
    /// says hello to each (`hello[i]` to ps task i, its incarnation set to this run's).
    pub fn connect(
        addresses: &[String],
        worker: u32,
        auth: &Auth,
        hello: Vec<Hello>,
        timeout: Duration,
    ) -> Result<Client, String> {
        // The calling thread drives the connections while it waits for a reply: no hand-off to
        // a runtime thread and back on every call.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the gRPC runtime: {e}"))?;
        let header = auth
            .token
            .header()
            .map(|h| h.parse())
            .transpose()
            .map_err(|_| "the token is not printable ASCII".to_string())?;
        let mut ps = Vec::with_capacity(addresses.len());
        // Lazy channels spawn their connection tasks on this runtime.
        let _inside = rt.enter();
        for a in addresses {
            let scheme = if auth.tls.is_some() { "https" } else { "http" };
            let mut endpoint =
                Endpoint::from_shared(format!("{scheme}://{a}")).map_err(|e| format!("ps address '{a}': {e}"))?;
            if let Some(tls) = &auth.tls {
                endpoint = endpoint.tls_config(tls.client()).map_err(|e| format!("TLS to the ps task at {a}: {e}"))?;
            }
            let endpoint = endpoint
                .tcp_nodelay(true)
                .initial_stream_window_size(WINDOW)
                .initial_connection_window_size(WINDOW)
                .connect_timeout(Duration::from_secs(10))
                // A connection gone half-open is found in a minute, not never.
                .http2_keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(30));
            // Connected on first use, and again after the task restarts.
            let channel = endpoint.connect_lazy();
            ps.push(
                ParameterServerClient::new(InterceptedService::new(channel, WithToken(header.clone())))
                    .max_decoding_message_size(wire::MAX_MESSAGE),
            );
        }
        let incarnation = new_incarnation();
        let mut client = Client {
            rt,
            ps,
            addresses: addresses.to_vec(),
            worker,
            incarnation,
            resume: 0,
            timeout,
            moved: AtomicU64::new(0),
            parts: Default::default(),
        };
        for (t, h) in hello.into_iter().enumerate() {
            let h = Hello { incarnation, ..h };
            let welcome = client
                .call(t, |mut c| {
                    let h = h.clone();
                    async move { c.hello(h).await }
                })
                .map_err(|e| {
                    format!(
                        "the ps task at {} refused worker {worker}: {}",
                        client.addresses[t],
                        e.message.split_once(": ").map_or(e.message.as_str(), |(_, m)| m)
                    )
                })?;
            client.resume = if t == 0 { welcome.resume } else { client.resume.min(welcome.resume) };
        }
        Ok(client)
    }

    /// Calls ps task `t`, again while it cannot be reached, up to the peer timeout. A call
    /// gets no longer than the peer timeout and a little more for its reply (the ps task's own
    /// waits end at its peer timeout, with an error saying what it awaited): a task that
    /// stops answering, stopped or cut off, is an error naming it, not a hang.
    fn call<T, F>(&self, t: usize, f: impl Fn(ParameterServerClient<Authed>) -> F) -> Result<T, RunError>
    where
        F: std::future::Future<Output = Result<Response<T>, Status>>,
    {
        let mut since: Option<Instant> = None;
        let limit = self.timeout + REPLY_GRACE;
        loop {
            let replied = self.rt.block_on(async { tokio::time::timeout(limit, f(self.ps[t].clone())).await });
            let Ok(replied) = replied else {
                return Err(RunError::new(
                    ErrorKind::Remote,
                    format!(
                        "ps task {t} ({}): no reply within {limit:?} (--peer-timeout and {REPLY_GRACE:?}): the task is stopped, overloaded or cut off",
                        self.addresses[t]
                    ),
                ));
            };
            match replied {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if tls_failure(&s).is_some() => {
                    let why = tls_failure(&s).unwrap_or_default();
                    return Err(RunError::new(
                        ErrorKind::Remote,
                        format!(
                            "ps task {t} ({}): TLS failed: {why} (every task's certificate must be signed by the cluster's CA, --tls-ca)",
                            self.addresses[t]
                        ),
                    ));
                }
                Err(s) if unreachable(&s) => {
                    let start = *since.get_or_insert_with(|| {
                        tracing::warn!(
                            "worker {}: ps task {t} ({}) is unreachable; waiting up to {:?} for it",
                            self.worker,
                            self.addresses[t],
                            self.timeout
                        );
                        Instant::now()
                    });
                    if start.elapsed() >= self.timeout {
                        return Err(self.remote(t, s));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(s) => return Err(self.remote(t, s)),
            }
        }
    }

    fn remote(&self, t: usize, s: Status) -> RunError {
        // A transport error's message is a word ("transport error"); its cause says what failed.
        let mut cause = std::error::Error::source(&s);
        let mut deepest = None;
        while let Some(e) = cause {
            deepest = Some(e.to_string());
            cause = e.source();
        }
        let why = match deepest {
            Some(d) if !s.message().contains(&d) => format!("{}: {d}", s.message()),
            _ => s.message().to_string(),
        };
        RunError::new(ErrorKind::Remote, format!("ps task {t} ({}): {why}", self.addresses[t]))
    }

    /// Reads `keys` of ps task `t` for step `step`, in one call; returns the tensors in the
    /// order of `keys`.
    pub fn pull(&self, step: u64, t: usize, keys: &[String]) -> Result<Vec<Arc<graphc_runtime::Tensor>>, RunError> {
        let request = Pull { worker: self.worker, step, keys: keys.to_vec(), incarnation: self.incarnation };
        let tensors = self.call(t, |mut c| {
            let request = request.clone();
            async move {
                let mut stream = c.pull(request.clone()).await?.into_inner();
                let mut received = Received::default();
                while let Some(chunk) = stream.message().await? {
                    received.add(chunk, request.keys.len(), |_| Ok(None)).map_err(Status::data_loss)?;
                }
                let tensors = received.finish();
                let got: Vec<&str> = tensors.iter().map(|a| a.key.as_str()).collect();
                if got != request.keys {
                    return Err(Status::data_loss(format!("asked for {:?}, the reply holds {got:?}", request.keys)));
                }
                let tensors = tensors.into_iter().map(|a| a.finish().map(Arc::new)).collect::<Result<Vec<_>, _>>();
                tensors.map(Response::new).map_err(Status::data_loss)
            }
        })?;
        let bytes: usize = tensors.iter().map(|v| v.len() * v.dtype().size_bytes()).sum();
        self.moved.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(tensors)
    }

    /// Sends step `step`'s update for ps task `t` (its tensors by key) in one stream.
    pub fn push(
        &self,
        step: u64,
        t: usize,
        update: &[(String, Arc<graphc_runtime::Tensor>)],
    ) -> Result<bool, RunError> {
        let bytes: usize = update.iter().map(|(_, v)| v.len() * v.dtype().size_bytes()).sum();
        let reply = self.call(t, |mut c| {
            // Cut again per attempt: a stream is spent by its call.
            let from = Sender { worker: self.worker, incarnation: self.incarnation, step };
            let chunks: Vec<Chunk> = update.iter().flat_map(|(k, v)| wire::chunks(k, from, v)).collect();
            async move { c.push(tokio_stream::iter(chunks)).await }
        })?;
        self.moved.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(reply.counted)
    }

    /// Asks every ps task for its shard of step `step` (the final checkpoint's: `last`);
    /// returns them, in task order.
    pub fn save(&self, step: u64, last: bool) -> Result<Vec<crate::checkpoint::Shard>, RunError> {
        (0..self.ps.len())
            .map(|t| loop {
                let saved = self.call(t, |mut c| async move { c.save(Save { step, last }).await })?;
                // A final shard waits for the workers still running: asked again while they are.
                if !saved.pending {
                    return Ok(crate::checkpoint::Shard { path: saved.file.into(), settled: saved.settled });
                }
            })
            .collect()
    }

    /// The cluster's checkpoint of step `step` (the chief's): every ps task's shard, then the
    /// index at `index`. The final checkpoint (`last`, asked for after [`Client::done`] said
    /// it would be) holds every worker's last update.
    pub fn checkpoint(&self, index: &std::path::Path, step: u64, last: bool) -> Result<(), String> {
        let shards = self.save(step, last).map_err(|e| e.message)?;
        crate::checkpoint::write_index(index, step, &shards, &self.parts)
    }

    /// Tells every ps task this worker's step failed (as far as they can be reached now).
    pub fn abort(&self, error: &str) {
        for c in &self.ps {
            let mut c = c.clone();
            let request = Abort { worker: self.worker, error: error.to_string() };
            let _ =
                self.rt.block_on(async move { tokio::time::timeout(Duration::from_secs(5), c.abort(request)).await });
        }
    }

    /// Tells every ps task this worker is done, and (the chief) whether it asks for the final
    /// checkpoint next, which they then wait for.
    pub fn done(&self, final_checkpoint: bool) -> Result<(), String> {
        for t in 0..self.ps.len() {
            let worker = self.worker;
            self.call(t, |mut c| async move { c.done(Done { worker, final_checkpoint }).await })
                .map_err(|e| e.message)?;
        }
        Ok(())
    }

    /// Bytes of tensors pulled and pushed so far.
    pub fn bytes_moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }
}

/// What a worker's step exchanges with one ps task: the keys it reads, and how many tensors
/// it pushes.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    pub reads: Vec<String>,
    pub pushes: usize,
}

impl Exchange {
    /// Per ps task, what a step exchanges with it.
    pub fn of(programs: &[PsProgram]) -> Vec<Exchange> {
        programs.iter().map(|p| Exchange { reads: p.reads.keys().cloned().collect(), pushes: p.pushes.len() }).collect()
    }
}

/// The worker's rendezvous: `psN/` keys go to ps task N, other keys (between the task's own
/// devices) stay in the process. A step's first read of a ps task's variable pulls all it
/// reads of that task in one call (a step reads its variables before it updates them, so they
/// hold the same values then), and its sends to one ps task are held until all of them came,
/// then go as one push, so a ps task gets a worker's update whole or not at all. Each step
/// that touches a ps key takes the next training step number (runs of other graphs, like the
/// input pipeline's, touch none).
#[derive(Debug)]
pub struct PsRendezvousFactory {
    client: Arc<Client>,
    steps: Arc<AtomicU64>,
    /// Per ps task: what a step exchanges with it.
    exchanges: Arc<Vec<Exchange>>,
}

impl PsRendezvousFactory {
    /// Steps numbered from `from + 1`; `exchanges[t]`: what a step exchanges with ps task t.
    pub fn new(client: Arc<Client>, from: u64, exchanges: Vec<Exchange>) -> Self {
        PsRendezvousFactory { client, steps: Arc::new(AtomicU64::new(from)), exchanges: Arc::new(exchanges) }
    }
}

impl RendezvousFactory for PsRendezvousFactory {
    fn rendezvous(&self, _step: u64) -> Arc<dyn Rendezvous> {
        let tasks = self.exchanges.len();
        Arc::new(PsRendezvous {
            client: self.client.clone(),
            steps: self.steps.clone(),
            step: OnceLock::new(),
            local: LocalRendezvous::default(),
            exchanges: self.exchanges.clone(),
            pulled: (0..tasks).map(|_| std::sync::Mutex::new(None)).collect(),
            held: std::sync::Mutex::new(vec![Vec::new(); tasks]),
        })
    }
}

#[derive(Debug)]
struct PsRendezvous {
    client: Arc<Client>,
    steps: Arc<AtomicU64>,
    step: OnceLock<u64>,
    local: LocalRendezvous,
    exchanges: Arc<Vec<Exchange>>,
    /// Per ps task: the step's reads of it, by key, once pulled.
    pulled: Vec<std::sync::Mutex<Option<Pulled>>>,
    held: std::sync::Mutex<Vec<Update>>,
}

/// A step's tensors for one ps task, by key.
type Update = Vec<(String, Arc<graphc_runtime::Tensor>)>;

/// A step's reads of one ps task, by key.
type Pulled = BTreeMap<String, Arc<graphc_runtime::Tensor>>;

impl PsRendezvous {
    fn step(&self) -> u64 {
        *self.step.get_or_init(|| self.steps.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

impl Rendezvous for PsRendezvous {
    fn send(&self, key: String, value: RtValue) -> Result<(), RunError> {
        let Some(t) = task_of(&key) else { return self.local.send(key, value) };
        let RtValue::Tensor(tensor) = value else {
            return Err(RunError::internal(format!("send of \"{key}\" to a ps task is not a tensor")));
        };
        let step = self.step();
        let update = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let slot = held.get_mut(t).ok_or_else(|| {
                RunError::internal(format!("rendezvous key \"{key}\" names no ps task of the cluster"))
            })?;
            slot.push((key, tensor));
            if slot.len() < self.exchanges[t].pushes {
                return Ok(());
            }
            std::mem::take(slot)
        };
        self.client.push(step, t, &update).map(|_| ())
    }

    fn recv(&self, wait: &WaitCtx<'_>, key: &str) -> Result<RtValue, RunError> {
        let Some(t) = task_of(key) else { return self.local.recv(wait, key) };
        let no_read =
            || RunError::internal(format!("rendezvous key \"{key}\" names no read of a ps task of the cluster"));
        let mut pulled = self.pulled.get(t).ok_or_else(no_read)?.lock().unwrap_or_else(|e| e.into_inner());
        if pulled.is_none() {
            let keys = &self.exchanges[t].reads;
            let tensors = self.client.pull(self.step(), t, keys)?;
            *pulled = Some(keys.iter().cloned().zip(tensors).collect());
        }
        pulled.as_ref().and_then(|p| p.get(key)).cloned().map(RtValue::Tensor).ok_or_else(no_read)
    }

    /// A failed training step stops the training on every task, with this error. Runs of
    /// other graphs (the input pipeline's, which retries its timeouts) and steps cancelled by
    /// another graph's failure are not the training's failures.
    fn abort(&self, error: &RunError) {
        if self.step.get().is_some() && !matches!(error.kind, ErrorKind::Cancelled | ErrorKind::QueueClosed) {
            self.client.abort(&error.to_string());
        }
    }
}
