//! Concurrent clients: read-modify-write commands are atomic per key, MSET is atomic to
//! readers, and many clients writing at once end in exactly the state a model predicts.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redis::{Commands, cmd};

const CLIENTS: usize = 8;

#[test]
fn concurrent_incr_append_and_hset_lose_no_update() {
    incr_append_hset_race(common::start("dram:hash"));
}

/// The same race with the commands handed to worker threads instead of run on the
/// network threads (the default for a volatile engine is inline).
#[test]
fn concurrent_incr_append_and_hset_lose_no_update_on_workers() {
    let config = tierkv_server::ServerConfig {
        inline_commands: Some(false),
        ..common::test_config()
    };
    incr_append_hset_race(common::start_with(
        tierkv::Options::default().engine("dram:hash"),
        config,
    ));
}

#[expect(
    clippy::unwrap_used,
    reason = "the body of two tests: a failure is a test failure"
)]
fn incr_append_hset_race(srv: common::TestServer) {
    std::thread::scope(|s| {
        for t in 0..CLIENTS {
            let srv = &srv;
            s.spawn(move || {
                let mut c = srv.client();
                for i in 0..300 {
                    c.incr::<_, _, i64>("counter", 1).unwrap();
                    cmd("APPEND")
                        .arg("log")
                        .arg("x")
                        .query::<i64>(&mut c)
                        .unwrap();
                    c.hset::<_, _, _, i64>("h", format!("t{t}:{i}"), i).unwrap();
                }
            });
        }
    });
    let mut c = srv.client();
    let n = (CLIENTS * 300) as i64;
    assert_eq!(c.get::<_, i64>("counter").unwrap(), n);
    assert_eq!(cmd("STRLEN").arg("log").query::<i64>(&mut c).unwrap(), n);
    assert_eq!(c.hlen::<_, i64>("h").unwrap(), n);
}

#[test]
fn only_one_setnx_wins_each_key() {
    let srv = common::start("dram:lockfree");
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let srv = &srv;
                s.spawn(move || {
                    let mut c = srv.client();
                    (0..200)
                        .filter(|k| {
                            cmd("SETNX")
                                .arg(format!("lock{k}"))
                                .arg(t)
                                .query::<i64>(&mut c)
                                .unwrap()
                                == 1
                        })
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(wins, 200);
}

#[test]
fn readers_never_see_half_an_mset() {
    let srv = common::start("dram:btree");
    let stop = AtomicBool::new(false);
    let keys: Vec<String> = (0..6).map(|i| format!("mset{i}")).collect();
    std::thread::scope(|s| {
        for w in 0..2 {
            let (srv, keys, stop) = (&srv, &keys, &stop);
            s.spawn(move || {
                let mut c = srv.client();
                for round in 0..400 {
                    let v = format!("{w}-{round}");
                    let pairs: Vec<(&str, &str)> =
                        keys.iter().map(|k| (k.as_str(), v.as_str())).collect();
                    c.mset::<_, _, ()>(&pairs).unwrap();
                }
                stop.store(true, Ordering::Relaxed);
            });
        }
        for _ in 0..2 {
            let (srv, keys, stop) = (&srv, &keys, &stop);
            s.spawn(move || {
                let mut c = srv.client();
                while !stop.load(Ordering::Relaxed) {
                    let got: Vec<Option<String>> = c.mget(keys).unwrap();
                    assert!(
                        got.windows(2).all(|w| w[0] == w[1]),
                        "torn MSET seen: {got:?}"
                    );
                }
            });
        }
    });
}

#[test]
fn many_clients_end_in_the_state_of_the_model() {
    let seed = common::seed();
    let srv = common::start("dram:btree");
    // Each client owns its keys, so its own model is exact; all share the store.
    let models: Vec<HashMap<String, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let srv = &srv;
                s.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ t as u64);
                    let mut c = srv.client();
                    let mut model = HashMap::new();
                    let mut pipe = redis::pipe();
                    for op in 0..2_000 {
                        let k = format!("c{t}:{}", rng.random_range(0..50));
                        if rng.random_bool(0.2) {
                            pipe.cmd("DEL").arg(&k).ignore();
                            model.remove(&k);
                        } else {
                            let v = format!("{op}");
                            pipe.cmd("SET").arg(&k).arg(&v).ignore();
                            model.insert(k, v);
                        }
                        if op % 64 == 63 {
                            pipe.query::<()>(&mut c).unwrap();
                            pipe.clear();
                        }
                    }
                    pipe.query::<()>(&mut c).unwrap();
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut c = srv.client();
    let mut expected = 0;
    for (t, model) in models.iter().enumerate() {
        for i in 0..50 {
            let k = format!("c{t}:{i}");
            assert_eq!(
                c.get::<_, Option<String>>(&k).unwrap().as_ref(),
                model.get(&k),
                "{k}"
            );
        }
        expected += model.len();
    }
    assert_eq!(cmd("DBSIZE").query::<usize>(&mut c).unwrap(), expected);
    let info: String = cmd("INFO").arg("clients").query(&mut c).unwrap();
    assert!(info.contains("connected_clients:"), "{info}");
}
