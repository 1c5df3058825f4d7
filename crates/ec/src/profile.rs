//! Erasure-code profiles: the `key=value` settings an operator names once
//! (`shoal osd erasure-code-profile set NAME k=3 m=1`) and pools are made
//! from. Parsing is strict: an unknown key or a value out of range is a
//! clear error, never silently ignored.

use std::collections::BTreeMap;

use crate::EcError;

/// Most chunks (`k + m`) of one profile: CRUSH's largest result.
pub const MAX_CHUNKS: u32 = 20;
/// The stripe unit when the profile names none (Ceph's
/// `osd_pool_erasure_code_stripe_unit`).
pub const DEFAULT_STRIPE_UNIT: u32 = 4096;
/// Largest stripe unit.
const MAX_STRIPE_UNIT: u32 = 4 << 20;
/// The profile called `default`, as Ceph's
/// `osd_pool_default_erasure_code_profile`.
pub const DEFAULT_PROFILE: &str = "k=2 m=2 plugin=jerasure technique=reed_sol_van";

/// Plugins whose code is Reed–Solomon, which is what Shoal computes.
const PLUGINS: &[&str] = &["jerasure", "isa"];
/// Reed–Solomon techniques of those plugins.
const TECHNIQUES: &[&str] = &["reed_sol_van", "cauchy", "cauchy_good", "cauchy_orig"];
/// Every key a profile may hold.
const KEYS: &[&str] = &[
    "k",
    "m",
    "plugin",
    "technique",
    "w",
    "stripe_unit",
    "crush-root",
    "crush-failure-domain",
    "crush-device-class",
];

/// An erasure-code profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcProfile {
    /// Data chunks per stripe.
    pub k: u32,
    /// Coding chunks per stripe: how many shards may be lost.
    pub m: u32,
    /// Bytes of one chunk of a stripe.
    pub stripe_unit: u32,
    /// The plugin named (`jerasure` or `isa`; both mean Reed–Solomon here).
    pub plugin: String,
    /// The technique named (kept as given; the code is Reed–Solomon).
    pub technique: String,
    /// The CRUSH root its rule takes.
    pub crush_root: String,
    /// The CRUSH type whose buckets each hold at most one shard.
    pub crush_failure_domain: String,
    /// The device class the rule takes (empty: every device).
    pub crush_device_class: String,
}

fn bad(msg: impl Into<String>) -> EcError {
    EcError::Profile(msg.into())
}

/// A size with an optional `K`/`M` suffix (`4096`, `64K`, `1M`).
fn parse_size(key: &str, v: &str) -> Result<u32, EcError> {
    let (num, shift) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
        _ => (v, 0),
    };
    num.parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| {
            bad(format!(
                "{key} must be a size in bytes (4096, 64K), not {v:?}"
            ))
        })
}

impl EcProfile {
    /// A profile from `key=value` words (`k=3 m=1 crush-failure-domain=osd`).
    pub fn parse_words(words: &str) -> Result<Self, EcError> {
        let mut params = BTreeMap::new();
        for w in words.split_whitespace() {
            let (key, value) = w
                .split_once('=')
                .ok_or_else(|| bad(format!("{w:?} is not key=value")))?;
            params.insert(key.to_string(), value.to_string());
        }
        Self::parse(&params)
    }

    /// A profile from its settings; keys not named take their defaults.
    pub fn parse(params: &BTreeMap<String, String>) -> Result<Self, EcError> {
        if let Some(key) = params.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(bad(format!(
                "unknown erasure-code profile key {key:?} (known: {})",
                KEYS.join(", ")
            )));
        }
        let get = |k: &str| params.get(k).map(String::as_str);
        let count = |key: &str, default: u32| -> Result<u32, EcError> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .parse::<u32>()
                    .map_err(|_| bad(format!("{key} must be a whole number, not {v:?}"))),
            }
        };
        let k = count("k", 2)?;
        let m = count("m", 2)?;
        if k < 2 {
            return Err(bad(format!("k must be at least 2, not {k}")));
        }
        if m < 1 {
            return Err(bad(format!("m must be at least 1, not {m}")));
        }
        if k.saturating_add(m) > MAX_CHUNKS {
            return Err(bad(format!(
                "k+m = {} is more than the {MAX_CHUNKS} chunks a stripe may have",
                k.saturating_add(m)
            )));
        }
        let plugin = get("plugin").unwrap_or("jerasure");
        if !PLUGINS.contains(&plugin) {
            return Err(bad(format!(
                "erasure-code plugin {plugin:?} is not available: Shoal codes Reed-Solomon \
                 (plugin={})",
                PLUGINS.join(" or plugin=")
            )));
        }
        let technique = get("technique").unwrap_or("reed_sol_van");
        if !TECHNIQUES.contains(&technique) {
            return Err(bad(format!(
                "technique {technique:?} is not a Reed-Solomon technique ({})",
                TECHNIQUES.join(", ")
            )));
        }
        if let Some(w) = get("w")
            && w != "8"
        {
            return Err(bad(format!(
                "w must be 8 (Reed-Solomon over GF(2^8)), not {w:?}"
            )));
        }
        let stripe_unit = match get("stripe_unit") {
            None => DEFAULT_STRIPE_UNIT,
            Some(v) => parse_size("stripe_unit", v)?,
        };
        if stripe_unit == 0 || stripe_unit % 4096 != 0 || stripe_unit > MAX_STRIPE_UNIT {
            return Err(bad(format!(
                "stripe_unit must be a multiple of 4096 up to {MAX_STRIPE_UNIT}, not {stripe_unit}"
            )));
        }
        let name = |key: &str, default: &str| -> Result<String, EcError> {
            let v = get(key).unwrap_or(default);
            let ok = v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if ok {
                Ok(v.to_string())
            } else {
                Err(bad(format!("{key} {v:?} is not a CRUSH name")))
            }
        };
        let profile = EcProfile {
            k,
            m,
            stripe_unit,
            plugin: plugin.to_string(),
            technique: technique.to_string(),
            crush_root: name("crush-root", "default")?,
            crush_failure_domain: name("crush-failure-domain", "host")?,
            crush_device_class: name("crush-device-class", "")?,
        };
        if profile.crush_root.is_empty() || profile.crush_failure_domain.is_empty() {
            return Err(bad("crush-root and crush-failure-domain may not be empty"));
        }
        Ok(profile)
    }

    /// The profile's settings, every key with its value (as `get` shows).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        [
            ("k", self.k.to_string()),
            ("m", self.m.to_string()),
            ("plugin", self.plugin.clone()),
            ("technique", self.technique.clone()),
            ("w", "8".to_string()),
            ("stripe_unit", self.stripe_unit.to_string()),
            ("crush-root", self.crush_root.clone()),
            ("crush-failure-domain", self.crush_failure_domain.clone()),
            ("crush-device-class", self.crush_device_class.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Bytes of one full stripe: `k × stripe_unit`.
    pub fn stripe_width(&self) -> u32 {
        self.k * self.stripe_unit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_the_operator_left_out() {
        let p = EcProfile::parse_words("k=3 m=1").unwrap();
        assert_eq!((p.k, p.m, p.stripe_unit), (3, 1, 4096));
        assert_eq!(p.crush_failure_domain, "host");
        assert_eq!(p.crush_root, "default");
        assert_eq!(p.crush_device_class, "");
        assert_eq!(p.stripe_width(), 3 * 4096);
        let d = EcProfile::parse_words(DEFAULT_PROFILE).unwrap();
        assert_eq!((d.k, d.m), (2, 2));
        // What `get` shows parses back to the same profile.
        assert_eq!(EcProfile::parse(&p.to_map()).unwrap(), p);
        let q = EcProfile::parse_words(
            "k=4 m=2 crush-failure-domain=osd crush-device-class=ssd stripe_unit=64K",
        )
        .unwrap();
        assert_eq!(q.stripe_unit, 65536);
        assert_eq!(EcProfile::parse(&q.to_map()).unwrap(), q);
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        for (words, says) in [
            ("k=1 m=1", "k must be at least 2"),
            ("k=2 m=0", "m must be at least 1"),
            ("k=two m=1", "whole number"),
            ("k=16 m=8", "more than the 20 chunks"),
            ("k=2 m=1 plugin=lrc", "not available"),
            (
                "k=2 m=1 technique=liberation",
                "not a Reed-Solomon technique",
            ),
            ("k=2 m=1 w=16", "w must be 8"),
            ("k=2 m=1 stripe_unit=1000", "multiple of 4096"),
            ("k=2 m=1 stripe_unit=0", "multiple of 4096"),
            ("k=2 m=1 stripe_unit=8M", "multiple of 4096 up to"),
            ("k=2 m=1 stripe_unit=99999999999", "size in bytes"),
            ("k=2 m=1 crush-failure-domain=a/b", "not a CRUSH name"),
            ("k=2 m=1 crush-root=", "may not be empty"),
            (
                "k=2 m=1 ruleset-failure-domain=host",
                "unknown erasure-code profile key",
            ),
            ("k=2 m", "is not key=value"),
        ] {
            let e = EcProfile::parse_words(words).unwrap_err().to_string();
            assert!(e.contains(says), "{words}: {e}");
        }
    }
}
