//! `requirepass`: commands before AUTH are refused; AUTH and HELLO AUTH work; a wrong
//! password is WRONGPASS; without a password configured AUTH says so.

mod common;

use redis::{Commands, Value, cmd};
use tierkv::Options;
use tierkv_server::ServerConfig;

fn with_password() -> common::TestServer {
    common::start_with(
        Options::default().engine("dram:btree"),
        ServerConfig {
            requirepass: Some("s3cret".into()),
            ..common::test_config()
        },
    )
}

#[test]
fn commands_before_auth_get_noauth() {
    let srv = with_password();
    let mut s = srv.raw();
    let got = common::exchange(&mut s, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", |b| {
        b.ends_with(b"\r\n")
    });
    assert_eq!(got, b"-NOAUTH Authentication required.\r\n");
    let got = common::exchange(&mut s, b"PING\r\n", |b| b.ends_with(b"\r\n"));
    assert_eq!(got, b"-NOAUTH Authentication required.\r\n");
    let got = common::exchange(&mut s, b"AUTH wrong\r\n", |b| b.ends_with(b"\r\n"));
    assert_eq!(
        got,
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    let got = common::exchange(&mut s, b"AUTH s3cret\r\nSET k v\r\nGET k\r\n", |b| {
        b.ends_with(b"v\r\n")
    });
    assert_eq!(got, b"+OK\r\n+OK\r\n$1\r\nv\r\n");
}

#[test]
fn unauthenticated_clients_cannot_send_large_requests() {
    let srv = with_password();
    let mut s = srv.raw();
    let big = vec![b'x'; 20_000];
    let req = common::resp(&[b"AUTH", &big]);
    let got = common::exchange(&mut s, &req, |_| false);
    assert_eq!(got, b"-ERR Protocol error: unauthenticated bulk length\r\n");
}

#[test]
fn clients_with_the_password_in_the_url_work() {
    let srv = with_password();
    let mut c = srv.client_url(&format!("redis://:s3cret@{}/", srv.addr));
    c.set::<_, _, ()>("k", "v").unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v");
    let mut c3 = srv.client_url(&format!(
        "redis://default:s3cret@{}/?protocol=resp3",
        srv.addr
    ));
    assert_eq!(c3.get::<_, String>("k").unwrap(), "v");
    let bad = redis::Client::open(format!("redis://:nope@{}/", srv.addr))
        .unwrap()
        .get_connection();
    assert!(bad.is_err(), "a wrong password fails the connection");
}

#[test]
fn hello_requires_authentication_or_its_auth_option() {
    let srv = with_password();
    let mut s = srv.raw();
    let got = common::exchange(&mut s, b"HELLO 3\r\n", |b| b.ends_with(b"\r\n"));
    assert!(
        got.starts_with(b"-NOAUTH HELLO must be called"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let got = common::exchange(&mut s, b"HELLO 3 AUTH default s3cret\r\n", |b| {
        b.ends_with(b"*0\r\n")
    });
    assert!(
        got.starts_with(b"%8\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let got = common::exchange(&mut s, b"GET nothing\r\n", |b| b.ends_with(b"\r\n"));
    assert_eq!(got, b"_\r\n", "RESP3 null after HELLO 3");
}

#[test]
fn auth_without_a_configured_password_is_an_error() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let e = common::error_of(&mut c, cmd("AUTH").arg("pw"));
    assert!(
        e.starts_with("ERR AUTH <password> called without any password configured"),
        "{e}"
    );
    // The default user without a password takes any password, as in Redis.
    let ok: Value = cmd("AUTH")
        .arg("default")
        .arg("anything")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, Value::Okay);
}
