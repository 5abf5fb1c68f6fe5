//! The command table: for each command its name, Redis arity, flags, key positions, the
//! documentation `COMMAND DOCS` returns, and its handler. Dispatch, the arity check, the
//! key locks and `COMMAND` all read this one table, so they cannot disagree.
//!
//! Arity is Redis's: `n > 0` means exactly `n` arguments (the name included), `n < 0` at
//! least `-n`. Key positions are Redis's (first, last, step); `last < 0` counts from the end.
//! A command with the `write` flag locks its keys exclusively, any other shared.
//! Lookup by name is a hash map built from this table once ([`super::lookup`]).
//!
//! Thread-safety: immutable static data.

use super::{
    Handler, bits, blocking, connection, expire, hashes, info, keys, lists, multi, scan, sets,
    strings, zsets,
};
use crate::resp::Args;

/// One command.
pub(crate) struct CommandSpec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub handler: Handler,
}

impl CommandSpec {
    /// True when `argc` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// True when the command has `flag`.
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }

    /// The keys of a call (the arity was checked).
    pub fn keys<'a>(&self, args: Args<'a>) -> impl Iterator<Item = &'a [u8]> + 'a {
        let argc = args.len() as i64;
        let (first, last) = if self.has_flag("numkeys") {
            // `name numkeys key [key ...] ...`: the keys follow their count.
            let n = super::parse_i64_strict(args.get(1))
                .unwrap_or(0)
                .clamp(0, argc);
            (2, 1 + n)
        } else {
            let last = match i64::from(self.last_key) {
                l if l < 0 => argc + l,
                l => l,
            };
            (i64::from(self.first_key), last)
        };
        let step = usize::try_from(self.step).unwrap_or(1).max(1);
        let range = if first > 0 && last >= first {
            first as usize..(last as usize + 1).min(args.len())
        } else {
            0..0
        };
        range.step_by(step).map(move |i| args.get(i))
    }
}

const READ_FAST: &[&str] = &["readonly", "fast"];
const WRITE: &[&str] = &["write", "denyoom"];
const WRITE_FAST: &[&str] = &["write", "denyoom", "fast"];

macro_rules! cmd {
    ($name:literal, $arity:expr, $flags:expr, ($f:expr, $l:expr, $s:expr),
     $group:literal, $since:literal, $summary:literal, $handler:path) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $f,
            last_key: $l,
            step: $s,
            group: $group,
            since: $since,
            summary: $summary,
            handler: $handler,
        }
    };
}

/// Every command the server knows.
pub(crate) static COMMANDS: &[CommandSpec] = &[
    cmd!(
        "get",
        2,
        READ_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Returns the string value of a key.",
        strings::get
    ),
    cmd!(
        "set",
        -3,
        WRITE,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
        strings::set
    ),
    cmd!(
        "incr",
        2,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Increments the integer value of a key by one.",
        strings::incr
    ),
    cmd!(
        "hset",
        -4,
        WRITE_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Creates or modifies the value of fields in a hash.",
        hashes::hset
    ),
    cmd!(
        "mset",
        -3,
        WRITE,
        (1, -1, 2),
        "string",
        "1.0.1",
        "Atomically sets the string values of one or more keys.",
        strings::mset
    ),
    cmd!(
        "mget",
        -2,
        READ_FAST,
        (1, -1, 1),
        "string",
        "1.0.0",
        "Atomically returns the string values of one or more keys.",
        strings::mget
    ),
    cmd!(
        "del",
        -2,
        &["write"],
        (1, -1, 1),
        "generic",
        "1.0.0",
        "Deletes one or more keys.",
        keys::del
    ),
    cmd!(
        "unlink",
        -2,
        &["write"],
        (1, -1, 1),
        "generic",
        "4.0.0",
        "Asynchronously deletes one or more keys.",
        keys::del
    ),
    cmd!(
        "exists",
        -2,
        READ_FAST,
        (1, -1, 1),
        "generic",
        "3.0.3",
        "Determines whether one or more keys exist.",
        keys::exists
    ),
    cmd!(
        "setnx",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Sets the string value of a key only when the key doesn't exist.",
        strings::setnx
    ),
    cmd!(
        "getset",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Returns the previous string value of a key after setting it to a new value.",
        strings::getset
    ),
    cmd!(
        "incrby",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Increments the integer value of a key by a number.",
        strings::incrby
    ),
    cmd!(
        "decr",
        2,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Decrements the integer value of a key by one.",
        strings::decr
    ),
    cmd!(
        "decrby",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "1.0.0",
        "Decrements a number from the integer value of a key.",
        strings::decrby
    ),
    cmd!(
        "append",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "2.0.0",
        "Appends a string to the value of a key; creates the key if needed.",
        strings::append
    ),
    cmd!(
        "strlen",
        2,
        READ_FAST,
        (1, 1, 1),
        "string",
        "2.2.0",
        "Returns the length of a string value.",
        strings::strlen
    ),
    cmd!(
        "hmset",
        -4,
        WRITE_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Sets the values of multiple fields.",
        hashes::hmset
    ),
    cmd!(
        "hget",
        3,
        READ_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Returns the value of a field in a hash.",
        hashes::hget
    ),
    cmd!(
        "hmget",
        -3,
        READ_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Returns the values of all fields in a hash.",
        hashes::hmget
    ),
    cmd!(
        "hgetall",
        2,
        &["readonly"],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Returns all fields and values in a hash.",
        hashes::hgetall
    ),
    cmd!(
        "hdel",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Deletes one or more fields and their values from a hash; deletes the hash if no fields remain.",
        hashes::hdel
    ),
    cmd!(
        "hexists",
        3,
        READ_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Determines whether a field exists in a hash.",
        hashes::hexists
    ),
    cmd!(
        "hlen",
        2,
        READ_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Returns the number of fields in a hash.",
        hashes::hlen
    ),
    cmd!(
        "type",
        2,
        READ_FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Determines the type of value stored at a key.",
        keys::type_of
    ),
    cmd!(
        "scan",
        -2,
        &["readonly"],
        (0, 0, 0),
        "generic",
        "2.8.0",
        "Iterates over the key names (in key order on ordered engines, by index shard on the others).",
        scan::scan
    ),
    cmd!(
        "dbsize",
        1,
        READ_FAST,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Returns the number of keys.",
        keys::dbsize
    ),
    cmd!(
        "ping",
        -1,
        &["fast"],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Returns the server's liveliness response.",
        connection::ping
    ),
    cmd!(
        "echo",
        2,
        &["fast"],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Returns the given string.",
        connection::echo
    ),
    cmd!(
        "hello",
        -1,
        &["no_auth", "fast"],
        (0, 0, 0),
        "connection",
        "6.0.0",
        "Handshakes with the server: protocol version, authentication, client name.",
        connection::hello
    ),
    cmd!(
        "auth",
        -2,
        &["no_auth", "fast"],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Authenticates the connection.",
        connection::auth
    ),
    cmd!(
        "select",
        2,
        &["fast"],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Changes the selected database (0 to 15).",
        connection::select
    ),
    cmd!(
        "quit",
        -1,
        &["no_auth", "fast", "multi_now"],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Closes the connection.",
        connection::quit
    ),
    cmd!(
        "client",
        -2,
        &[],
        (0, 0, 0),
        "connection",
        "2.4.0",
        "CLIENT ID, GETNAME, SETNAME, SETINFO.",
        connection::client
    ),
    cmd!(
        "command",
        -1,
        &[],
        (0, 0, 0),
        "server",
        "2.8.13",
        "Returns information about commands (COUNT, INFO, DOCS, LIST).",
        info::command
    ),
    cmd!(
        "info",
        -1,
        &[],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Returns information and statistics about the server.",
        info::info
    ),
    cmd!(
        "config",
        -2,
        &[],
        (0, 0, 0),
        "server",
        "2.0.0",
        "CONFIG GET reads the server's settings, CONFIG SET changes maxclients and keeps the Redis settings that have no effect here.",
        info::config
    ),
    cmd!(
        "multi",
        1,
        &["fast", "multi_now"],
        (0, 0, 0),
        "transactions",
        "1.2.0",
        "Starts a transaction.",
        multi::multi
    ),
    cmd!(
        "exec",
        1,
        &["multi_now"],
        (0, 0, 0),
        "transactions",
        "1.2.0",
        "Executes all commands in a transaction, isolated from other clients.",
        multi::exec
    ),
    cmd!(
        "discard",
        1,
        &["fast", "multi_now"],
        (0, 0, 0),
        "transactions",
        "2.0.0",
        "Discards a transaction.",
        multi::discard
    ),
    cmd!(
        "watch",
        -2,
        &["fast", "multi_now"],
        (1, -1, 1),
        "transactions",
        "2.2.0",
        "Monitors changes to keys to determine the execution of a transaction.",
        multi::watch
    ),
    cmd!(
        "unwatch",
        1,
        &["fast"],
        (0, 0, 0),
        "transactions",
        "2.2.0",
        "Forgets about watched keys of a transaction.",
        multi::unwatch
    ),
    cmd!(
        "expire",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Sets the expiration time of a key in seconds.",
        expire::expire
    ),
    cmd!(
        "pexpire",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Sets the expiration time of a key in milliseconds.",
        expire::pexpire
    ),
    cmd!(
        "expireat",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "generic",
        "1.2.0",
        "Sets the expiration time of a key to a Unix timestamp.",
        expire::expireat
    ),
    cmd!(
        "pexpireat",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        expire::pexpireat
    ),
    cmd!(
        "ttl",
        2,
        READ_FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Returns the expiration time in seconds of a key.",
        expire::ttl
    ),
    cmd!(
        "pttl",
        2,
        READ_FAST,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Returns the expiration time in milliseconds of a key.",
        expire::pttl
    ),
    cmd!(
        "expiretime",
        2,
        READ_FAST,
        (1, 1, 1),
        "generic",
        "7.0.0",
        "Returns the expiration time of a key as a Unix timestamp.",
        expire::expiretime
    ),
    cmd!(
        "pexpiretime",
        2,
        READ_FAST,
        (1, 1, 1),
        "generic",
        "7.0.0",
        "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        expire::pexpiretime
    ),
    cmd!(
        "persist",
        2,
        WRITE_FAST,
        (1, 1, 1),
        "generic",
        "2.2.0",
        "Removes the expiration time of a key.",
        expire::persist
    ),
    cmd!(
        "setex",
        4,
        WRITE,
        (1, 1, 1),
        "string",
        "2.0.0",
        "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.",
        expire::setex
    ),
    cmd!(
        "psetex",
        4,
        WRITE,
        (1, 1, 1),
        "string",
        "2.6.0",
        "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.",
        expire::psetex
    ),
    cmd!(
        "getex",
        -2,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "6.2.0",
        "Returns the string value of a key after setting its expiration time.",
        expire::getex
    ),
    cmd!(
        "getdel",
        2,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "6.2.0",
        "Returns the string value of a key after deleting the key.",
        strings::getdel
    ),
    cmd!(
        "getrange",
        4,
        &["readonly"],
        (1, 1, 1),
        "string",
        "2.4.0",
        "Returns a substring of the string stored at a key.",
        strings::getrange
    ),
    cmd!(
        "setrange",
        4,
        WRITE,
        (1, 1, 1),
        "string",
        "2.2.0",
        "Overwrites a part of a string value with another by an offset.",
        strings::setrange
    ),
    cmd!(
        "setbit",
        4,
        WRITE,
        (1, 1, 1),
        "bitmap",
        "2.2.0",
        "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.",
        bits::setbit
    ),
    cmd!(
        "getbit",
        3,
        READ_FAST,
        (1, 1, 1),
        "bitmap",
        "2.2.0",
        "Returns a bit value by offset.",
        bits::getbit
    ),
    cmd!(
        "bitcount",
        -2,
        &["readonly"],
        (1, 1, 1),
        "bitmap",
        "2.6.0",
        "Counts the number of set bits (population counting) in a string.",
        bits::bitcount
    ),
    cmd!(
        "msetnx",
        -3,
        WRITE,
        (1, -1, 2),
        "string",
        "1.0.1",
        "Atomically modifies the string values of one or more keys only when all keys don't exist.",
        strings::msetnx
    ),
    cmd!(
        "incrbyfloat",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "string",
        "2.6.0",
        "Increment the floating point value of a key by a number.",
        strings::incrbyfloat
    ),
    cmd!(
        "hincrby",
        4,
        WRITE_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Increments the integer value of a field in a hash by a number.",
        hashes::hincrby
    ),
    cmd!(
        "hkeys",
        2,
        &["readonly"],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Returns all fields in a hash.",
        hashes::hkeys
    ),
    cmd!(
        "hvals",
        2,
        &["readonly"],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Returns all values in a hash.",
        hashes::hvals
    ),
    cmd!(
        "rename",
        3,
        &["write"],
        (1, 2, 1),
        "generic",
        "1.0.0",
        "Renames a key and overwrites the destination.",
        keys::rename
    ),
    cmd!(
        "renamenx",
        3,
        WRITE_FAST,
        (1, 2, 1),
        "generic",
        "1.0.0",
        "Renames a key only when the target key name doesn't exist.",
        keys::renamenx
    ),
    cmd!(
        "time",
        1,
        &["fast"],
        (0, 0, 0),
        "server",
        "2.6.0",
        "Returns the server time.",
        keys::time
    ),
    cmd!(
        "flushdb",
        -1,
        &["write", "allkeys"],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Removes all keys from the current database.",
        keys::flushdb
    ),
    cmd!(
        "flushall",
        -1,
        &["write", "allkeys"],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Removes all keys from all databases.",
        keys::flushall
    ),
    cmd!(
        "swapdb",
        3,
        &["write", "fast", "allkeys"],
        (0, 0, 0),
        "server",
        "4.0.0",
        "Swaps two Redis databases.",
        keys::swapdb
    ),
    cmd!(
        "keys",
        2,
        &["readonly"],
        (0, 0, 0),
        "generic",
        "1.0.0",
        "Returns all key names that match a pattern.",
        scan::keys
    ),
    cmd!(
        "randomkey",
        1,
        &["readonly"],
        (0, 0, 0),
        "generic",
        "1.0.0",
        "Returns a random key name from the database.",
        scan::randomkey
    ),
    cmd!(
        "hscan",
        -3,
        &["readonly"],
        (1, 1, 1),
        "hash",
        "2.8.0",
        "Iterates over fields and values of a hash.",
        hashes::hscan
    ),
    cmd!(
        "hsetnx",
        4,
        WRITE_FAST,
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Sets the value of a field in a hash only when the field doesn't exist.",
        hashes::hsetnx
    ),
    cmd!(
        "hstrlen",
        3,
        READ_FAST,
        (1, 1, 1),
        "hash",
        "3.2.0",
        "Returns the length of the value of a field.",
        hashes::hstrlen
    ),
    cmd!(
        "hincrbyfloat",
        4,
        WRITE_FAST,
        (1, 1, 1),
        "hash",
        "2.6.0",
        "Increments the floating point value of a field by a number.",
        hashes::hincrbyfloat
    ),
    cmd!(
        "copy",
        -3,
        WRITE,
        (1, 2, 1),
        "generic",
        "6.2.0",
        "Copies the value of a key to a new key.",
        keys::copy
    ),
    cmd!(
        "lpush",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "list",
        "1.0.0",
        "Prepends one or more elements to a list. Creates the key if it doesn't exist.",
        lists::lpush
    ),
    cmd!(
        "rpush",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "list",
        "1.0.0",
        "Appends one or more elements to a list. Creates the key if it doesn't exist.",
        lists::rpush
    ),
    cmd!(
        "lpushx",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "list",
        "2.2.0",
        "Prepends one or more elements to a list only when the list exists.",
        lists::lpushx
    ),
    cmd!(
        "rpushx",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "list",
        "2.2.0",
        "Appends an element to a list only when the list exists.",
        lists::rpushx
    ),
    cmd!(
        "lpop",
        -2,
        WRITE_FAST,
        (1, 1, 1),
        "list",
        "1.0.0",
        "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.",
        lists::lpop
    ),
    cmd!(
        "rpop",
        -2,
        WRITE_FAST,
        (1, 1, 1),
        "list",
        "1.0.0",
        "Returns and removes the last elements of a list. Deletes the list if the last element was popped.",
        lists::rpop
    ),
    cmd!(
        "llen",
        2,
        READ_FAST,
        (1, 1, 1),
        "list",
        "1.0.0",
        "Returns the length of a list.",
        lists::llen
    ),
    cmd!(
        "lrange",
        4,
        &["readonly"],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Returns a range of elements from a list.",
        lists::lrange
    ),
    cmd!(
        "lindex",
        3,
        &["readonly"],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Returns an element from a list by its index.",
        lists::lindex
    ),
    cmd!(
        "lset",
        4,
        WRITE,
        (1, 1, 1),
        "list",
        "1.0.0",
        "Sets the value of an element in a list by its index.",
        lists::lset
    ),
    cmd!(
        "lrem",
        4,
        &["write"],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Removes elements from a list. Deletes the list if the last element was removed.",
        lists::lrem
    ),
    cmd!(
        "ltrim",
        4,
        &["write"],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Removes elements from both ends a list. Deletes the list if all elements were trimmed.",
        lists::ltrim
    ),
    cmd!(
        "linsert",
        5,
        WRITE,
        (1, 1, 1),
        "list",
        "2.2.0",
        "Inserts an element before or after another element in a list.",
        lists::linsert
    ),
    cmd!(
        "lpos",
        -3,
        &["readonly"],
        (1, 1, 1),
        "list",
        "6.0.6",
        "Returns the index of matching elements in a list.",
        lists::lpos
    ),
    cmd!(
        "lmove",
        5,
        WRITE,
        (1, 2, 1),
        "list",
        "6.2.0",
        "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.",
        lists::lmove
    ),
    cmd!(
        "rpoplpush",
        3,
        WRITE,
        (1, 2, 1),
        "list",
        "1.2.0",
        "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.",
        lists::rpoplpush
    ),
    cmd!(
        "blpop",
        -3,
        &["write", "blocking"],
        (1, -2, 1),
        "list",
        "2.0.0",
        "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
        blocking::blpop
    ),
    cmd!(
        "brpop",
        -3,
        &["write", "blocking"],
        (1, -2, 1),
        "list",
        "2.0.0",
        "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
        blocking::brpop
    ),
    cmd!(
        "blmove",
        6,
        &["write", "denyoom", "blocking"],
        (1, 2, 1),
        "list",
        "6.2.0",
        "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.",
        blocking::blmove
    ),
    cmd!(
        "brpoplpush",
        4,
        &["write", "denyoom", "blocking"],
        (1, 2, 1),
        "list",
        "2.2.0",
        "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.",
        blocking::brpoplpush
    ),
    cmd!(
        "sadd",
        -3,
        WRITE_FAST,
        (1, 1, 1),
        "set",
        "1.0.0",
        "Adds one or more members to a set. Creates the key if it doesn't exist.",
        sets::sadd
    ),
    cmd!(
        "srem",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Removes one or more members from a set. Deletes the set if the last member was removed.",
        sets::srem
    ),
    cmd!(
        "sismember",
        3,
        READ_FAST,
        (1, 1, 1),
        "set",
        "1.0.0",
        "Determines whether a member belongs to a set.",
        sets::sismember
    ),
    cmd!(
        "smismember",
        -3,
        READ_FAST,
        (1, 1, 1),
        "set",
        "6.2.0",
        "Determines whether multiple members belong to a set.",
        sets::smismember
    ),
    cmd!(
        "scard",
        2,
        READ_FAST,
        (1, 1, 1),
        "set",
        "1.0.0",
        "Returns the number of members in a set.",
        sets::scard
    ),
    cmd!(
        "smembers",
        2,
        &["readonly"],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Returns all members of a set.",
        sets::smembers
    ),
    cmd!(
        "srandmember",
        -2,
        &["readonly"],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Get one or multiple random members from a set",
        sets::srandmember
    ),
    cmd!(
        "spop",
        -2,
        &["write", "fast"],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.",
        sets::spop
    ),
    cmd!(
        "smove",
        4,
        &["write", "fast"],
        (1, 2, 1),
        "set",
        "1.0.0",
        "Moves a member from one set to another.",
        sets::smove
    ),
    cmd!(
        "sinter",
        -2,
        &["readonly"],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Returns the intersect of multiple sets.",
        sets::sinter
    ),
    cmd!(
        "sunion",
        -2,
        &["readonly"],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Returns the union of multiple sets.",
        sets::sunion
    ),
    cmd!(
        "sdiff",
        -2,
        &["readonly"],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Returns the difference of multiple sets.",
        sets::sdiff
    ),
    cmd!(
        "sinterstore",
        -3,
        WRITE,
        (1, -1, 1),
        "set",
        "1.0.0",
        "Stores the intersect of multiple sets in a key.",
        sets::sinterstore
    ),
    cmd!(
        "sunionstore",
        -3,
        WRITE,
        (1, -1, 1),
        "set",
        "1.0.0",
        "Stores the union of multiple sets in a key.",
        sets::sunionstore
    ),
    cmd!(
        "sdiffstore",
        -3,
        WRITE,
        (1, -1, 1),
        "set",
        "1.0.0",
        "Stores the difference of multiple sets in a key.",
        sets::sdiffstore
    ),
    cmd!(
        "sintercard",
        -3,
        &["readonly", "numkeys"],
        (0, 0, 0),
        "set",
        "7.0.0",
        "Returns the number of members of the intersect of multiple sets.",
        sets::sintercard
    ),
    cmd!(
        "sscan",
        -3,
        &["readonly"],
        (1, 1, 1),
        "set",
        "2.8.0",
        "Iterates over members of a set.",
        sets::sscan
    ),
    cmd!(
        "zadd",
        -4,
        WRITE_FAST,
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.",
        zsets::zadd
    ),
    cmd!(
        "zincrby",
        4,
        WRITE_FAST,
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Increments the score of a member in a sorted set.",
        zsets::zincrby
    ),
    cmd!(
        "zscore",
        3,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Returns the score of a member in a sorted set.",
        zsets::zscore
    ),
    cmd!(
        "zmscore",
        -3,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "6.2.0",
        "Returns the score of one or more members in a sorted set.",
        zsets::zmscore
    ),
    cmd!(
        "zcard",
        2,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Returns the number of members in a sorted set.",
        zsets::zcard
    ),
    cmd!(
        "zrank",
        3,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Returns the index of a member in a sorted set ordered by ascending scores.",
        zsets::zrank
    ),
    cmd!(
        "zrevrank",
        3,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Returns the index of a member in a sorted set ordered by descending scores.",
        zsets::zrevrank
    ),
    cmd!(
        "zcount",
        4,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Returns the count of members in a sorted set that have scores within a range.",
        zsets::zcount
    ),
    cmd!(
        "zlexcount",
        4,
        READ_FAST,
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Returns the number of members in a sorted set within a lexicographical range.",
        zsets::zlexcount
    ),
    cmd!(
        "zrange",
        -4,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Returns members in a sorted set within a range of indexes.",
        zsets::zrange
    ),
    cmd!(
        "zrevrange",
        -4,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Returns members in a sorted set within a range of indexes in reverse order.",
        zsets::zrevrange
    ),
    cmd!(
        "zrangebyscore",
        -4,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "1.0.5",
        "Returns members in a sorted set within a range of scores.",
        zsets::zrangebyscore
    ),
    cmd!(
        "zrevrangebyscore",
        -4,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "2.2.0",
        "Returns members in a sorted set within a range of scores in reverse order.",
        zsets::zrevrangebyscore
    ),
    cmd!(
        "zrangebylex",
        -4,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Returns members in a sorted set within a lexicographical range.",
        zsets::zrangebylex
    ),
    cmd!(
        "zrevrangebylex",
        -4,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Returns members in a sorted set within a lexicographical range in reverse order.",
        zsets::zrevrangebylex
    ),
    cmd!(
        "zpopmin",
        -2,
        &["write", "fast"],
        (1, 1, 1),
        "sorted-set",
        "5.0.0",
        "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.",
        zsets::zpopmin
    ),
    cmd!(
        "zpopmax",
        -2,
        &["write", "fast"],
        (1, 1, 1),
        "sorted-set",
        "5.0.0",
        "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.",
        zsets::zpopmax
    ),
    cmd!(
        "zrem",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.",
        zsets::zrem
    ),
    cmd!(
        "zremrangebyrank",
        4,
        &["write"],
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.",
        zsets::zremrangebyrank
    ),
    cmd!(
        "zremrangebyscore",
        4,
        &["write"],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.",
        zsets::zremrangebyscore
    ),
    cmd!(
        "zremrangebylex",
        4,
        &["write"],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.",
        zsets::zremrangebylex
    ),
    cmd!(
        "zscan",
        -3,
        &["readonly"],
        (1, 1, 1),
        "sorted-set",
        "2.8.0",
        "Iterates over members and scores of a sorted set.",
        zsets::zscan
    ),
    cmd!(
        "move",
        3,
        WRITE_FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Moves a key to another database.",
        keys::move_key
    ),
    cmd!(
        "hrandfield",
        -2,
        &["readonly"],
        (1, 1, 1),
        "hash",
        "6.2.0",
        "Returns one or more random fields from a hash.",
        hashes::hrandfield
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::parser::{ParserLimits, RequestParser};

    #[test]
    fn arity_follows_redis_conventions() {
        let get = COMMANDS.iter().find(|c| c.name == "get").unwrap();
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let mset = COMMANDS.iter().find(|c| c.name == "mset").unwrap();
        assert!(mset.arity_ok(3) && mset.arity_ok(7) && !mset.arity_ok(2));
    }

    #[test]
    fn key_positions_follow_step_and_negative_last() {
        let limits = ParserLimits {
            max_bulk_len: 100,
            max_args: 100,
            max_request_bytes: 1000,
            max_commands: 10,
        };
        let mut p = RequestParser::new(limits, true);
        let mut buf = bytes::BytesMut::from(&b"MSET a 1 b 2 c 3\r\n"[..]);
        p.parse(&buf).unwrap();
        let mut batch = crate::resp::Batch::default();
        p.take_batch(&mut buf, &mut batch);
        let args = batch.command(0).unwrap();
        let mset = COMMANDS.iter().find(|c| c.name == "mset").unwrap();
        let keys: Vec<&[u8]> = mset.keys(args).collect();
        assert_eq!(keys, vec![&b"a"[..], b"b", b"c"]);
        let ping = COMMANDS.iter().find(|c| c.name == "ping").unwrap();
        assert_eq!(ping.keys(args).count(), 0);
    }

    #[test]
    fn names_are_unique_and_lowercase() {
        let mut names: Vec<_> = COMMANDS.iter().map(|c| c.name).collect();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase()))
        );
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
    }
}
