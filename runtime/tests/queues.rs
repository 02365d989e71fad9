//! Queues shared by concurrent runs: no loss, no duplication, blocking, close, timeouts.

mod common;
use common::*;
use graphc_runtime::{ErrorKind, RunRequest, Session, SessionOptions};
use std::time::{Duration, Instant};

const PIPE: &str = "graph @produce(%x: i64[]) -> (t: token) {
  %q = queue {name = \"q\", capacity = 3} : queue<i64[], f32[2]>
  %c = cast %x {to = f32} : f32[]
  %b = broadcast %c {shape = [2]} : f32[2]
  %t = enqueue %q, %x, %b : token
  return %t
}

graph @consume() -> (x: i64[], b: f32[2]) {
  %q = queue {name = \"q\", capacity = 3} : queue<i64[], f32[2]>
  %x, %b = dequeue %q : i64[], f32[2]
  return %x, %b
}

graph @close() -> (t: token) {
  %q = queue {name = \"q\", capacity = 3} : queue<i64[], f32[2]>
  %t = queue_close %q : token
  return %t
}

graph @size() -> (n: i64[]) {
  %q = queue {name = \"q\", capacity = 3} : queue<i64[], f32[2]>
  %n = queue_size %q : i64[]
  return %n
}
";

fn produce(s: &Session, x: i64) -> Result<(), graphc_runtime::RunError> {
    s.run(RunRequest::new("produce").feed("x", i64t(&[], &[x]))).map(|_| ())
}

fn consume(s: &Session) -> Result<i64, graphc_runtime::RunError> {
    let out = s.run(RunRequest::new("consume"))?;
    let x = out.get("x").unwrap().to_f64_vec()[0];
    assert_eq!(out.get("b").unwrap(), &f32t(&[2], &[x as f32; 2]), "components stay together");
    Ok(x as i64)
}

#[test]
fn one_producer_one_consumer_in_order() {
    let s = session(PIPE);
    let got = std::thread::scope(|sc| {
        sc.spawn(|| (0..100).for_each(|i| produce(&s, i).unwrap()));
        sc.spawn(|| (0..100).map(|_| consume(&s).unwrap()).collect::<Vec<_>>()).join().unwrap()
    });
    assert_eq!(got, (0..100).collect::<Vec<_>>(), "FIFO, nothing lost or repeated");
}

#[test]
fn many_producers_and_consumers_lose_and_duplicate_nothing() {
    let s = session(PIPE);
    let mut got: Vec<i64> = std::thread::scope(|sc| {
        for p in 0..3 {
            let s = &s;
            sc.spawn(move || (0..50).for_each(|i| produce(s, p * 1000 + i).unwrap()));
        }
        let consumers: Vec<_> =
            (0..2).map(|_| sc.spawn(|| (0..75).map(|_| consume(&s).unwrap()).collect::<Vec<_>>())).collect();
        consumers.into_iter().flat_map(|c| c.join().unwrap()).collect()
    });
    got.sort();
    let mut want: Vec<i64> = (0..3).flat_map(|p| (0..50).map(move |i| p * 1000 + i)).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(got.iter().sum::<i64>(), 3 * 1225 + 50 * 3000);
    let n = s.run(RunRequest::new("size")).unwrap();
    assert_eq!(n.get("n").unwrap(), &i64t(&[], &[0]));
}

#[test]
fn closing_wakes_a_blocked_consumer_with_a_clear_error() {
    let s = session(PIPE);
    let (e, waited) = std::thread::scope(|sc| {
        let waiter = sc.spawn(|| {
            let start = Instant::now();
            (consume(&s).unwrap_err(), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(150));
        s.run(RunRequest::new("close")).unwrap();
        waiter.join().unwrap()
    });
    assert!(waited >= Duration::from_millis(100), "it blocked until the close");
    assert_eq!(e.kind, ErrorKind::QueueClosed);
    assert!(e.message.contains("queue \"q\"") && e.message.contains("closed"), "{e}");
}

#[test]
fn a_closed_queue_drains_then_fails_and_refuses_enqueues() {
    let s = session(PIPE);
    produce(&s, 1).unwrap();
    produce(&s, 2).unwrap();
    s.run(RunRequest::new("close")).unwrap();
    let e = produce(&s, 3).unwrap_err();
    assert_eq!(e.kind, ErrorKind::QueueClosed);
    assert_eq!(consume(&s).unwrap(), 1);
    assert_eq!(consume(&s).unwrap(), 2);
    assert_eq!(consume(&s).unwrap_err().kind, ErrorKind::QueueClosed);
}

#[test]
fn a_full_queue_blocks_until_the_timeout() {
    let s = session_with(PIPE, SessionOptions { wait_timeout: Some(Duration::from_millis(100)), ..Default::default() });
    for i in 0..3 {
        produce(&s, i).unwrap();
    }
    let start = Instant::now();
    let e = produce(&s, 3).unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(100));
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.message.contains("full (3 elements)"), "{e}");
    // A consumer makes room, and the producer goes on.
    assert_eq!(consume(&s).unwrap(), 0);
    produce(&s, 3).unwrap();
}

#[test]
fn a_blocked_producer_resumes_when_a_consumer_makes_room() {
    let s = session(PIPE);
    for i in 0..3 {
        produce(&s, i).unwrap();
    }
    std::thread::scope(|sc| {
        let p = sc.spawn(|| produce(&s, 3));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(consume(&s).unwrap(), 0);
        p.join().unwrap().unwrap();
    });
    assert_eq!((0..3).map(|_| consume(&s).unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
}
