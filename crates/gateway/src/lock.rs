//! Object lock, as AWS defines it: a bucket made with object lock is
//! versioned for good and may carry a default retention; each object
//! version may carry a retention (GOVERNANCE or COMPLIANCE until a date)
//! and a legal hold. A locked version cannot be deleted by anyone, the
//! bucket's owner included: a legal hold until it is lifted, a COMPLIANCE
//! retention until its date, a GOVERNANCE one until its date unless the
//! request bypasses governance (`x-amz-bypass-governance-retention: true`,
//! by whom may). A retention may be extended in its mode, never
//! shortened (a GOVERNANCE one may, or change mode, bypassing governance).
//!
//! The rules are pure functions here; `s3.rs` applies them.

use serde::{Deserialize, Serialize};

/// A retention's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mode {
    /// Yields to a request that bypasses governance.
    Governance,
    /// Yields to nobody until its date.
    Compliance,
}

impl Mode {
    /// S3's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Governance => "GOVERNANCE",
            Mode::Compliance => "COMPLIANCE",
        }
    }

    /// The mode S3 names `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "GOVERNANCE" => Some(Mode::Governance),
            "COMPLIANCE" => Some(Mode::Compliance),
            _ => None,
        }
    }
}

/// An object version's retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Its mode.
    pub mode: Mode,
    /// Until when, ms since the Unix epoch.
    pub until_ms: u64,
}

impl Retention {
    fn active(&self, now_ms: u64) -> bool {
        self.until_ms > now_ms
    }
}

/// A bucket's object lock: on (it exists), with a default retention for
/// new objects or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockConfig {
    /// The default retention: its mode and its length in days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DefaultRetention>,
}

/// A bucket's default retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    /// Its mode.
    pub mode: Mode,
    /// Its length, as given: days or years.
    pub days: u32,
    /// Whether given in years (`days` is then years).
    #[serde(default)]
    pub years: bool,
}

const DAY_MS: u64 = 24 * 3600 * 1000;

impl LockConfig {
    /// The retention a new object gets when its request gives none.
    pub fn default_retention(&self, now_ms: u64) -> Option<Retention> {
        self.default.map(|d| {
            let days = if d.years {
                u64::from(d.days) * 365
            } else {
                u64::from(d.days)
            };
            Retention {
                mode: d.mode,
                until_ms: now_ms + days * DAY_MS,
            }
        })
    }
}

/// Why an object version may not go, or its retention not change.
pub type Refusal = &'static str;

/// Whether a version with `retention` and `legal_hold` may be deleted at
/// `now_ms` (`bypass`: the request bypasses governance, and may).
pub fn may_delete(
    retention: Option<&Retention>,
    legal_hold: bool,
    now_ms: u64,
    bypass: bool,
) -> Result<(), Refusal> {
    if legal_hold {
        return Err("the object version is under a legal hold");
    }
    match retention {
        Some(r) if r.active(now_ms) && r.mode == Mode::Compliance => {
            Err("the object version is locked in COMPLIANCE mode until its retention date")
        }
        Some(r) if r.active(now_ms) && !bypass => Err(
            "the object version is locked in GOVERNANCE mode until its retention date (bypass governance retention to delete it)",
        ),
        _ => Ok(()),
    }
}

/// Whether a version's retention may go from `old` to `new` at `now_ms`.
pub fn may_change(
    old: Option<&Retention>,
    new: Option<&Retention>,
    now_ms: u64,
    bypass: bool,
) -> Result<(), Refusal> {
    let Some(old) = old.filter(|o| o.active(now_ms)) else {
        return Ok(());
    };
    let extends = new.is_some_and(|n| n.until_ms >= old.until_ms);
    match old.mode {
        Mode::Compliance if extends && new.is_some_and(|n| n.mode == Mode::Compliance) => Ok(()),
        Mode::Compliance => {
            Err("a COMPLIANCE retention can only be extended, in COMPLIANCE mode, until its date")
        }
        Mode::Governance if bypass => Ok(()),
        Mode::Governance if extends && new.is_some_and(|n| n.mode == Mode::Governance) => Ok(()),
        Mode::Governance => Err(
            "a GOVERNANCE retention can only be extended, in GOVERNANCE mode, unless governance retention is bypassed",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000 * DAY_MS;

    fn r(mode: Mode, days_from_now: i64) -> Retention {
        Retention {
            mode,
            until_ms: (NOW as i64 + days_from_now * DAY_MS as i64) as u64,
        }
    }

    #[test]
    fn locked_versions_stay_whoever_asks() {
        let gov = r(Mode::Governance, 1);
        let comp = r(Mode::Compliance, 1);
        assert!(may_delete(None, false, NOW, false).is_ok());
        assert!(may_delete(None, true, NOW, true).is_err());
        assert!(may_delete(Some(&comp), false, NOW, true).is_err());
        assert!(may_delete(Some(&gov), false, NOW, false).is_err());
        assert!(may_delete(Some(&gov), false, NOW, true).is_ok());
        // Past their date they lock nothing (a legal hold still does).
        let past = r(Mode::Compliance, -1);
        assert!(may_delete(Some(&past), false, NOW, false).is_ok());
        assert!(may_delete(Some(&past), true, NOW, false).is_err());
    }

    #[test]
    fn retentions_are_extended_never_shortened() {
        let comp = r(Mode::Compliance, 10);
        let gov = r(Mode::Governance, 10);
        assert!(may_change(Some(&comp), Some(&r(Mode::Compliance, 20)), NOW, false).is_ok());
        assert!(may_change(Some(&comp), Some(&r(Mode::Compliance, 5)), NOW, true).is_err());
        assert!(may_change(Some(&comp), Some(&r(Mode::Governance, 20)), NOW, true).is_err());
        assert!(may_change(Some(&comp), None, NOW, true).is_err());
        assert!(may_change(Some(&gov), Some(&r(Mode::Governance, 20)), NOW, false).is_ok());
        assert!(may_change(Some(&gov), Some(&r(Mode::Compliance, 20)), NOW, false).is_err());
        assert!(may_change(Some(&gov), Some(&r(Mode::Compliance, 20)), NOW, true).is_ok());
        assert!(may_change(Some(&gov), Some(&r(Mode::Governance, 5)), NOW, false).is_err());
        assert!(may_change(Some(&gov), Some(&r(Mode::Governance, 5)), NOW, true).is_ok());
        assert!(may_change(Some(&gov), None, NOW, true).is_ok());
        assert!(may_change(Some(&r(Mode::Compliance, -1)), None, NOW, false).is_ok());
        assert!(may_change(None, Some(&comp), NOW, false).is_ok());
    }

    #[test]
    fn default_retention_in_days_or_years() {
        let c = LockConfig {
            default: Some(DefaultRetention {
                mode: Mode::Governance,
                days: 2,
                years: false,
            }),
        };
        assert_eq!(c.default_retention(NOW), Some(r(Mode::Governance, 2)));
        let y = LockConfig {
            default: Some(DefaultRetention {
                mode: Mode::Compliance,
                days: 1,
                years: true,
            }),
        };
        assert_eq!(y.default_retention(NOW), Some(r(Mode::Compliance, 365)));
        assert_eq!(LockConfig::default().default_retention(NOW), None);
    }
}
