//! Byte sizes as users write them: `4096`, `64KiB`, `128MiB`, `1GiB` (also `KB`/`MB`/`GB`
//! meaning powers of 1000, and the bare suffixes `K`, `M`, `G` meaning powers of 1024).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::error::Error;

/// A number of bytes that parses from and prints as a human-readable size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// `n` KiB.
    pub const fn kib(n: u64) -> Self {
        ByteSize(n << 10)
    }
    /// `n` MiB.
    pub const fn mib(n: u64) -> Self {
        ByteSize(n << 20)
    }
    /// `n` GiB.
    pub const fn gib(n: u64) -> Self {
        ByteSize(n << 30)
    }
    /// The number of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            other => {
                return Err(Error::invalid(format!(
                    "size {s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, TiB)"
                )));
            }
        };
        if num.is_empty() {
            return Err(Error::invalid(format!("size {s:?}: no number")));
        }
        let bytes = if num.contains('.') {
            let f: f64 = num
                .parse()
                .map_err(|_| Error::invalid(format!("size {s:?}: bad number")))?;
            let b = f * mult as f64;
            if !b.is_finite() || b < 0.0 || b > u64::MAX as f64 {
                return Err(Error::invalid(format!("size {s:?} is out of range")));
            }
            b.round() as u64
        } else {
            let n: u64 = num
                .parse()
                .map_err(|_| Error::invalid(format!("size {s:?}: bad number")))?;
            n.checked_mul(mult)
                .ok_or_else(|| Error::invalid(format!("size {s:?} is too large")))?
        };
        Ok(ByteSize(bytes))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        for (name, shift) in UNITS {
            if self.0 >= 1 << shift && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{name}", self.0 >> shift);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl serde::Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count or a size such as \"128MiB\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("size must not be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A time as people write it on command lines: `30s`, `1.5s`, `500ms`, `2m` (or `2min`),
/// `1h`, or bare seconds (`90`). The one parser of the CLI's durations.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("time {s:?}: expected a number and a unit, e.g. 30s"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1_000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3_600.0,
        other => return Err(format!("time {s:?}: unknown unit {other:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("time {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_the_rest() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "soon", "5 fortnights", "-1s", "1e400s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!("4096".parse::<ByteSize>().unwrap(), ByteSize(4096));
        assert_eq!("64KiB".parse::<ByteSize>().unwrap(), ByteSize(65536));
        assert_eq!("128 MiB".parse::<ByteSize>().unwrap(), ByteSize(128 << 20));
        assert_eq!("1GiB".parse::<ByteSize>().unwrap(), ByteSize(1 << 30));
        assert_eq!("2g".parse::<ByteSize>().unwrap(), ByteSize(2 << 30));
        assert_eq!("1.5KiB".parse::<ByteSize>().unwrap(), ByteSize(1536));
        assert_eq!("10MB".parse::<ByteSize>().unwrap(), ByteSize(10_000_000));
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        for bad in [
            "",
            "MiB",
            "12 parsecs",
            "-1",
            "99999999999999999999TiB",
            "1e9",
        ] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn display_round_trips() {
        for n in [0, 1, 1000, 1024, 3 << 20, (1 << 30) + 1, 5 << 40] {
            let b = ByteSize(n);
            assert_eq!(b.to_string().parse::<ByteSize>().unwrap(), b);
        }
        assert_eq!(ByteSize::mib(128).to_string(), "128MiB");
    }
}
