//! The cluster's token, over loopback: a ps task refuses a worker that comes without the
//! token and one that comes with another, saying which (and never what the token is), and
//! serves the worker with the right one.

use graphc_dist::service::{self, Auth, Client, Token};
use graphc_dist::wire::{Hello, SyncMode};
use graphc_dist::{split, ParameterServer, PsOptions};
use graphc_runtime::SessionOptions;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

const SECRET: &str = "s3cret-of-the-cluster";

#[test]
fn a_missing_token_and_a_wrong_one_are_told_apart_without_the_token() {
    let module = graphc_ir::parse_module(STEP).unwrap();
    let program = split(&module, "step", 1, graphc_dist::split::MIN_SLICE_BYTES).unwrap().tasks.remove(0);
    let fingerprint = program.fingerprint();
    let options = PsOptions {
        workers: 1,
        sync: SyncMode::Async,
        peer_timeout: Duration::from_secs(30),
        checkpoint: None,
        tasks: 1,
        log: None,
    };
    let ps = Arc::new(ParameterServer::new(0, program, options, SessionOptions::default()).unwrap());
    // A free port on loopback, claimed for the ps task.
    let listener = service::claim(SocketAddr::from(([127, 0, 0, 1], 0)), "ps task 0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let auth = |token: Option<&str>| Auth { token: Token::new(token.map(str::to_string)), tls: None };
    let server_auth = auth(Some(SECRET));
    let server = std::thread::spawn(move || service::serve(ps, listener, server_auth));
    let hello =
        Hello { worker: 0, workers: 1, sync: SyncMode::Async.to_string(), program: fingerprint, incarnation: 0 };
    let address = [format!("127.0.0.1:{port}")];
    // The client retries until the server listens, then takes the server's refusal at once.
    let connect =
        |token: Option<&str>| Client::connect(&address, 0, &auth(token), vec![hello.clone()], Duration::from_secs(30));
    let start = Instant::now();
    let missing = connect(None).unwrap_err();
    assert!(
        missing.starts_with(&format!("the ps task at {} refused worker 0: ", address[0]))
            && missing.contains("this task needs the cluster's token, and the request came without one"),
        "{missing}"
    );
    let wrong = connect(Some("not-the-secret")).unwrap_err();
    assert!(wrong.contains("the request's token does not match the cluster's"), "{wrong}");
    for e in [&missing, &wrong] {
        assert!(!e.contains(SECRET) && !e.contains("not-the-secret"), "the token shows: {e}");
    }
    let right = connect(Some(SECRET)).unwrap();
    right.done(false).unwrap();
    server.join().unwrap().unwrap();
    assert!(start.elapsed() < Duration::from_secs(60));
}
