//! Engine spec strings: `name[:variant][@key=value,key=value...]`.
//!
//! One string names an engine and its configuration everywhere: in [`Options`], on the
//! CLI, in `tierkv bench --engines` and as the label of every report, so that one run can
//! compare two configurations of one engine (`prism,prism@queue_depth=1`).
//!
//! The engine parses its own parameters with [`EngineParams::take`] and calls
//! [`EngineParams::finish`], which rejects any key it did not take: a misspelt option is an
//! error, never silently ignored.
//!
//! [`Options`]: crate::Options

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::error::{Error, Result};

/// A parsed engine spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EngineSpec {
    /// The engine's name (`prism`, `dram`, ...).
    pub name: String,
    /// The variant after `:` (`btree`, `hash`, ...), if given.
    pub variant: Option<String>,
    /// The options after `@`, in key order.
    pub params: BTreeMap<String, String>,
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl EngineSpec {
    /// A spec with only a name.
    pub fn named(name: &str) -> Self {
        EngineSpec {
            name: name.to_owned(),
            variant: None,
            params: BTreeMap::new(),
        }
    }

    /// The spec with its variant replaced.
    #[must_use]
    pub fn with_variant(mut self, variant: &str) -> Self {
        self.variant = Some(variant.to_owned());
        self
    }

    /// `name` or `name:variant`, without parameters: what the manifest pins.
    pub fn base(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}:{v}", self.name),
            None => self.name.clone(),
        }
    }

    /// The parameters, ready to be taken one by one by the engine.
    pub fn params(&self) -> EngineParams {
        EngineParams {
            spec: self.to_string(),
            left: self.params.clone(),
        }
    }
}

impl FromStr for EngineSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::invalid(format!("engine spec {s:?}: {why}"));
        let (head, params_str) = match s.split_once('@') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        let (name, variant) = match head.split_once(':') {
            Some((n, v)) => (n, Some(v)),
            None => (head, None),
        };
        if !is_ident(name) {
            return Err(bad(
                "the engine name must be lowercase letters, digits, '_' or '-'",
            ));
        }
        if let Some(v) = variant
            && !is_ident(v)
        {
            return Err(bad(
                "the variant after ':' must be lowercase letters, digits, '_' or '-'",
            ));
        }
        let mut params = BTreeMap::new();
        if let Some(p) = params_str {
            if p.is_empty() {
                return Err(bad("nothing after '@'"));
            }
            for item in p.split(',') {
                let (k, v) = item
                    .split_once('=')
                    .ok_or_else(|| bad(&format!("option {item:?} is not key=value")))?;
                if !is_ident(k) {
                    return Err(bad(&format!("option name {k:?} is not valid")));
                }
                if v.is_empty() {
                    return Err(bad(&format!("option {k} has no value")));
                }
                if params.insert(k.to_owned(), v.to_owned()).is_some() {
                    return Err(bad(&format!("option {k} is given twice")));
                }
            }
        }
        Ok(EngineSpec {
            name: name.to_owned(),
            variant: variant.map(str::to_owned),
            params,
        })
    }
}

impl fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base())?;
        for (i, (k, v)) in self.params.iter().enumerate() {
            f.write_str(if i == 0 { "@" } else { "," })?;
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// The parameters of a spec, consumed one at a time by the engine that parses them.
#[derive(Debug)]
pub struct EngineParams {
    spec: String,
    left: BTreeMap<String, String>,
}

impl EngineParams {
    /// True when the spec sets `key` (and it was not taken yet).
    pub fn contains(&self, key: &str) -> bool {
        self.left.contains_key(key)
    }

    /// Takes `key`, parsed as `T`, or `default` when the spec does not set it.
    pub fn take<T>(&mut self, key: &str, default: T) -> Result<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match self.left.remove(key) {
            None => Ok(default),
            Some(raw) => raw.parse().map_err(|e| {
                Error::invalid(format!(
                    "engine spec {:?}: option {key}={raw}: {e}",
                    self.spec
                ))
            }),
        }
    }

    /// Takes `key` and checks it against `valid` (a predicate and what it requires).
    pub fn take_checked<T>(
        &mut self,
        key: &str,
        default: T,
        valid: impl Fn(&T) -> bool,
        requirement: &str,
    ) -> Result<T>
    where
        T: FromStr + fmt::Display,
        T::Err: fmt::Display,
    {
        let v = self.take(key, default)?;
        if valid(&v) {
            Ok(v)
        } else {
            Err(Error::invalid(format!(
                "engine spec {:?}: option {key}={v}: {requirement}",
                self.spec
            )))
        }
    }

    /// Fails if any parameter was not taken (a misspelt or foreign option).
    pub fn finish(self) -> Result<()> {
        match self.left.keys().next() {
            None => Ok(()),
            Some(k) => Err(Error::invalid(format!(
                "engine spec {:?}: unknown option {k:?}",
                self.spec
            ))),
        }
    }
}

/// `on` / `off` (also `true` / `false`, `1` / `0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch(pub bool);

impl FromStr for Switch {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "on" | "true" | "1" => Ok(Switch(true)),
            "off" | "false" | "0" => Ok(Switch(false)),
            _ => Err(Error::invalid(format!("{s:?}: expected on or off"))),
        }
    }
}

impl std::fmt::Display for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0 { "on" } else { "off" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_name_variant_and_params() {
        let s: EngineSpec = "prism:x@queue_depth=1,read_batching=timeout"
            .parse()
            .unwrap();
        assert_eq!(s.name, "prism");
        assert_eq!(s.variant.as_deref(), Some("x"));
        assert_eq!(s.params.len(), 2);
        assert_eq!(s.to_string(), "prism:x@queue_depth=1,read_batching=timeout");
        assert_eq!(s.base(), "prism:x");
    }

    #[test]
    fn rejects_malformed_specs() {
        for bad in [
            "",
            "Prism",
            "a b",
            "x:",
            "x@",
            "x@a",
            "x@a=",
            "x@a=1,a=2",
            "x@=1",
            ":y",
        ] {
            assert!(bad.parse::<EngineSpec>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn params_are_typed_and_unknown_ones_rejected() {
        let s: EngineSpec = "e@depth=8,ratio=0.5,typo=1".parse().unwrap();
        let mut p = s.params();
        assert_eq!(p.take("depth", 64u32).unwrap(), 8);
        assert_eq!(p.take("ratio", 0.1f64).unwrap(), 0.5);
        assert_eq!(p.take("absent", 7u8).unwrap(), 7);
        let err = p.finish().unwrap_err().to_string();
        assert!(err.contains("unknown option \"typo\""), "{err}");

        let s: EngineSpec = "e@depth=x".parse().unwrap();
        assert!(s.params().take("depth", 1u32).is_err());
        let s: EngineSpec = "e@depth=0".parse().unwrap();
        let e = s
            .params()
            .take_checked("depth", 1u32, |d| *d > 0, "must be positive");
        assert!(e.unwrap_err().to_string().contains("must be positive"));
    }
}
