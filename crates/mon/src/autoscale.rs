//! The PG autoscaler, as Ceph's manager module computes it: each pool's
//! share of the raw capacity (what it stores times its raw bytes per
//! stored byte, over every OSD's space), the PG count that share of the
//! cluster's budget (`mon_target_pg_per_osd` × OSDs in) calls for, to the
//! nearest power of two and at least `mon_pg_autoscale_pg_num_min`, and
//! whether the pool is off from it by the threshold (3×); what the
//! operator said of a pool (`target_size_bytes`, `target_size_ratio`,
//! `bulk`, `pg_num_min`, `pg_num_max`) weighs in as Ceph's module lets
//! it ([`status`]). From that the
//! leader grows a pool whose mode is `on` ([`next_growth`]) and raises
//! `POOL_TOO_FEW_PGS` / `POOL_TOO_MANY_PGS` for one whose mode is `warn`
//! ([`health`]). It only grows: merging PGs is not there yet. Pure:
//! functions of the replicated state and the options.

use shoal_maps::AutoscaleMode;
use shoal_monclient::replies::{
    AUTOSCALE_STATUS_VERSION, AutoscaleStatusReply, HealthCheck, PoolAutoscale,
};
use shoal_monclient::{ErrorCode, MonError};

use crate::state::MonState;
use crate::views_space::FullRatios;

/// The autoscaler's settings (central configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// `mon_target_pg_per_osd`.
    pub target_pg_per_osd: u32,
    /// `mon_pg_autoscale_threshold`.
    pub threshold: f64,
    /// `mon_pg_autoscale_pg_num_min`.
    pub pg_num_min: u32,
}

impl Settings {
    /// From the options.
    pub fn of(o: &shoal_config::Options) -> Self {
        Settings {
            target_pg_per_osd: o.mon_target_pg_per_osd,
            threshold: o.mon_pg_autoscale_threshold.max(1.0),
            pg_num_min: o
                .mon_pg_autoscale_pg_num_min
                .clamp(1, shoal_maps::MAX_PG_NUM),
        }
    }

    /// From the central configuration.
    pub fn central(state: &MonState) -> Result<Self, MonError> {
        crate::service::leader_options(state)
            .map(|o| Settings::of(&o))
            .ok_or_else(|| MonError::new(ErrorCode::Internal, "the autoscaler's options"))
    }
}

/// The nearest power of two (ties up), at least 1, at most `MAX_PG_NUM`.
fn nearest_power_of_two(x: f64) -> u32 {
    if x.is_nan() || x <= 1.0 {
        return 1;
    }
    let lo = 2f64.powi(x.log2().floor() as i32);
    let hi = lo * 2.0;
    let p = if x - lo < hi - x { lo } else { hi };
    p.min(f64::from(shoal_maps::MAX_PG_NUM)) as u32
}

/// `osd pool autoscale-status`: every pool's share and the count it calls
/// for.
///
/// A pool's share is the largest of: what it stores (or its
/// `target_size_bytes`, if more) times its raw bytes per stored byte over
/// the raw capacity; its `target_size_ratio` over every pool's, times the
/// share the pools without one leave; and, for a `bulk` pool, an even
/// share of what the other pools leave. Its count is then kept within its
/// `pg_num_min` (or the central minimum) and `pg_num_max`.
pub fn status(state: &MonState, s: &Settings) -> Result<AutoscaleStatusReply, MonError> {
    let map = state.osdmap.current()?;
    let (capacity, _, _) = crate::views_pg::raw_space(state);
    let osds_in = map.osds().filter(|(_, o)| o.exists && o.weight > 0).count() as u64;
    let budget = f64::from(s.target_pg_per_osd) * osds_in as f64;
    let usage = crate::views_pg::pool_usage(state);
    let share = |bytes: u64, rate: f64| {
        if capacity == 0 {
            0.0
        } else {
            bytes as f64 * rate / capacity as f64
        }
    };
    struct Row<'a> {
        p: &'a shoal_maps::Pool,
        rate: f64,
        stored: u64,
        capacity_ratio: f64,
        bytes_ratio: f64,
        target_ratio: f64,
    }
    let rows: Vec<Row<'_>> = map
        .pools()
        .values()
        .map(|p| {
            let rate = crate::views_pg::raw_per_stored(p);
            let stored = usage.get(&p.id).map_or(0, |u| u.0);
            Row {
                p,
                rate,
                stored,
                capacity_ratio: share(stored, rate),
                bytes_ratio: share(stored.max(p.autoscale.target_size_bytes), rate),
                target_ratio: p.autoscale.target_size_ratio(),
            }
        })
        .collect();
    // The pools with a target ratio share what the others do not take.
    let total_target: f64 = rows.iter().map(|r| r.target_ratio).sum();
    let taken: f64 = rows
        .iter()
        .filter(|r| r.target_ratio == 0.0)
        .map(|r| r.bytes_ratio)
        .sum();
    let effective = |r: &Row<'_>| {
        if r.target_ratio == 0.0 || total_target == 0.0 {
            0.0
        } else {
            r.target_ratio / total_target * (1.0 - taken).max(0.0)
        }
    };
    let first: Vec<f64> = rows
        .iter()
        .map(|r| r.bytes_ratio.max(effective(r)))
        .collect();
    // Bulk pools without a ratio split evenly what every other pool leaves.
    let even_pool = |r: &Row<'_>| r.p.bulk() && r.target_ratio == 0.0;
    let bulk = rows.iter().filter(|r| even_pool(r)).count();
    let others: f64 = rows
        .iter()
        .zip(&first)
        .filter(|(r, _)| !even_pool(r))
        .map(|(_, f)| f)
        .sum();
    let even = if bulk == 0 {
        0.0
    } else {
        (1.0 - others).max(0.0) / bulk as f64
    };
    let pools = rows
        .iter()
        .zip(first)
        .map(|(r, first)| {
            let p = r.p;
            let final_ratio = if even_pool(r) { first.max(even) } else { first };
            let min = match p.autoscale.pg_num_min {
                0 => s.pg_num_min,
                n => n,
            };
            let max = match p.autoscale.pg_num_max {
                0 => shoal_maps::MAX_PG_NUM,
                n => n,
            };
            let ideal =
                nearest_power_of_two(final_ratio * budget / r.rate).clamp(min.min(max), max);
            let now = p.pg_num.max(1);
            let (now_f, ideal_f) = (f64::from(now), f64::from(ideal));
            let out_of_bounds = now < min.min(max) || now > max;
            PoolAutoscale {
                pool_name: p.name.clone(),
                pool_id: p.id,
                logical_used: r.stored,
                raw_used_rate: r.rate,
                raw_capacity: capacity,
                capacity_ratio: r.capacity_ratio,
                pg_num_target: p.pg_num,
                pg_num_ideal: ideal,
                pg_autoscale_mode: p.autoscale_mode().to_string(),
                would_adjust: ideal != now
                    && (ideal_f > now_f * s.threshold
                        || ideal_f * s.threshold < now_f
                        || out_of_bounds),
                target_bytes: p.autoscale.target_size_bytes,
                target_ratio: r.target_ratio,
                effective_target_ratio: effective(r),
                final_ratio,
                bulk: p.bulk(),
                pg_num_min: p.autoscale.pg_num_min,
                pg_num_max: p.autoscale.pg_num_max,
            }
        })
        .collect();
    Ok(AutoscaleStatusReply {
        version: AUTOSCALE_STATUS_VERSION,
        target_pg_per_osd: s.target_pg_per_osd,
        threshold: s.threshold,
        osds_in,
        pools,
    })
}

/// The pool the leader should grow now, and to how many PGs: one whose
/// mode is `on` and whose share calls for the threshold times more PGs,
/// whose placement is not still moving after an earlier change and whose
/// PGs are all active+clean, while no OSD is nearfull (the split is in
/// place, but placement then moves copies, which needs room). One pool a
/// round.
pub fn next_growth(state: &MonState, s: &Settings, ratios: &FullRatios) -> Option<(u64, u32)> {
    let map = state.osdmap.current().ok()?;
    let crowded = state.osd_statfs.iter().any(|(id, st)| {
        map.is_up(*id)
            && st.total_bytes > 0
            && st.used_bytes as f64 / st.total_bytes as f64 > ratios.nearfull
    });
    if crowded {
        return None;
    }
    let v = status(state, s).ok()?;
    v.pools.iter().find_map(|a| {
        let p = map.pool(a.pool_id)?;
        let grow = p.autoscale_mode() == AutoscaleMode::On
            && a.would_adjust
            && a.pg_num_ideal > p.pg_num
            && p.pgp_num == p.pg_num
            && !state.osdmap.pgp_num_target.contains_key(&p.id)
            && crate::views_pg::pool_clean(state, p.id);
        grow.then_some((p.id, a.pg_num_ideal))
    })
}

/// `POOL_TOO_FEW_PGS` and `POOL_TOO_MANY_PGS` for the pools whose mode is
/// `warn` and whose `pg_num` is off by the threshold, as Ceph's
/// autoscaler warns.
pub fn health(state: &MonState) -> Vec<HealthCheck> {
    // Most clusters have no pool in warn: nothing to size.
    let any_warn = state.osdmap.current().is_ok_and(|m| {
        m.pools()
            .values()
            .any(|p| p.autoscale_mode() == AutoscaleMode::Warn)
    });
    if !any_warn {
        return Vec::new();
    }
    let Ok(s) = Settings::central(state) else {
        return Vec::new();
    };
    let Ok(v) = status(state, &s) else {
        return Vec::new();
    };
    let warned = v
        .pools
        .iter()
        .filter(|p| p.would_adjust && p.pg_autoscale_mode == AutoscaleMode::Warn.as_str());
    let (few, many): (Vec<&PoolAutoscale>, Vec<&PoolAutoscale>) =
        warned.partition(|p| p.pg_num_ideal > p.pg_num_target);
    let mut checks = Vec::new();
    for (code, list, word) in [
        ("POOL_TOO_FEW_PGS", few, "too few"),
        ("POOL_TOO_MANY_PGS", many, "too many"),
    ] {
        if list.is_empty() {
            continue;
        }
        checks.push(HealthCheck::warn(
            code,
            format!("{} pools have {word} placement groups", list.len()),
            list.iter()
                .map(|p| {
                    format!(
                        "Pool {} has {} placement groups, should have {}",
                        p.pool_name, p.pg_num_target, p.pg_num_ideal
                    )
                })
                .collect(),
        ));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::osdmap::OsdChange;
    use crate::state::MonRequest;
    use crate::views_pg::tests::{primary, report, state};

    const SETTINGS: Settings = Settings {
        target_pg_per_osd: 100,
        threshold: 3.0,
        pg_num_min: 8,
    };

    fn set(s: &mut MonState, key: &str, value: &str) {
        let r = s.apply(&MonRequest::Osd(OsdChange::PoolSet {
            name: "rbd".into(),
            key: key.into(),
            value: value.into(),
        }));
        assert!(matches!(r, crate::state::MonResponse::Ok(_)), "{r:?}");
    }

    /// Every PG of rbd active+clean with `objects` objects of 1000 bytes
    /// in all, each of the 3 OSDs of 10 000 bytes with `avail` free.
    fn fill(s: &mut MonState, objects: u64, avail: u64) {
        let pg_num = s.osdmap.current().unwrap().pool(1).unwrap().pg_num;
        let mut by_osd: std::collections::BTreeMap<i32, Vec<String>> =
            (0..3).map(|o| (o, Vec::new())).collect();
        for seed in 0..pg_num {
            let pg = format!("1.{seed:x}");
            by_osd.entry(primary(s, &pg)).or_default().push(pg);
        }
        let per_pg = objects / u64::from(pg_num);
        for (osd, pgs) in by_osd {
            let pgs: Vec<(&str, &str, u64)> = pgs
                .iter()
                .map(|p| (p.as_str(), "active+clean", per_pg))
                .collect();
            report(s, osd, avail, &pgs);
        }
    }

    #[test]
    fn nearest_powers_of_two() {
        for (x, p) in [
            (0.0, 1),
            (1.5, 2),
            (3.0, 4),
            (5.9, 4),
            (6.0, 8),
            (24.0, 32),
            (90.0, 64),
            (96.0, 128),
        ] {
            assert_eq!(nearest_power_of_two(x), p, "{x}");
        }
        assert_eq!(nearest_power_of_two(f64::NAN), 1);
        assert_eq!(nearest_power_of_two(1e12), shoal_maps::MAX_PG_NUM);
    }

    #[test]
    fn a_pool_grows_with_its_share_when_on_and_warns_when_warn() {
        let mut s = state();
        // 3 OSDs of 10 000 bytes; rbd (3 copies) empty: its floor, and
        // 8 PGs are not off from it.
        fill(&mut s, 0, 9000);
        let v = status(&s, &SETTINGS).unwrap();
        let rbd = &v.pools[0];
        assert_eq!((rbd.pool_name.as_str(), rbd.pg_num_ideal), ("rbd", 8));
        assert!(!rbd.would_adjust);
        assert_eq!(rbd.pg_autoscale_mode, "on");
        assert_eq!(next_growth(&s, &SETTINGS, &FullRatios::default()), None);
        // 8 objects of 1000 bytes: 24 000 raw of 30 000, a ratio of 0.8:
        // 0.8 × 300 / 3 = 80 → 64 PGs, 8× more than it has.
        fill(&mut s, 8, 9000);
        let rbd = &status(&s, &SETTINGS).unwrap().pools[0];
        assert!((rbd.capacity_ratio - 0.8).abs() < 1e-9, "{rbd:?}");
        assert_eq!(rbd.pg_num_ideal, 64);
        assert!(rbd.would_adjust);
        let ratios = FullRatios::default();
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), Some((1, 64)));
        // Not while an OSD is nearfull (placement then moves copies).
        fill(&mut s, 8, 1000);
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), None);
        // Nor while a PG is not clean.
        fill(&mut s, 8, 9000);
        let p = primary(&s, "1.3");
        report(&mut s, p, 9000, &[("1.3", "active+recovering", 1)]);
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), None);
        fill(&mut s, 8, 9000);
        // Grown: pgp_num follows in steps, and the mode stays on.
        let r = s.apply(&MonRequest::Osd(OsdChange::AutoscalePgNum {
            pool: 1,
            pg_num: 64,
        }));
        assert!(matches!(r, crate::state::MonResponse::Ok(_)), "{r:?}");
        let pool = s.osdmap.current().unwrap().pool(1).unwrap().clone();
        assert_eq!((pool.pg_num, pool.pgp_num), (64, 8));
        assert_eq!(pool.autoscale_mode(), AutoscaleMode::On);
        assert_eq!(s.osdmap.pgp_num_target.get(&1), Some(&64));
        // While placement moves it is not grown again.
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), None);

        // warn: a health check, no growth.
        let mut s = state();
        fill(&mut s, 8, 9000);
        set(&mut s, "pg_autoscale_mode", "warn");
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), None);
        let h = health(&s);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].code, "POOL_TOO_FEW_PGS");
        assert_eq!(
            h[0].detail,
            ["Pool rbd has 8 placement groups, should have 64"]
        );
        // Setting pg_num by hand turns the mode off, as Ceph does.
        set(&mut s, "pg_num", "16");
        let pool = s.osdmap.current().unwrap().pool(1).unwrap().clone();
        assert_eq!(pool.autoscale_mode(), AutoscaleMode::Off);
        assert!(health(&s).is_empty());
        let e = s.apply(&MonRequest::Osd(OsdChange::AutoscalePgNum {
            pool: 1,
            pg_num: 64,
        }));
        assert!(
            matches!(&e, crate::state::MonResponse::Err { message, .. } if message.contains("off")),
            "{e:?}"
        );
        // A mode that is none of the three is refused.
        let e = s.apply(&MonRequest::Osd(OsdChange::PoolSet {
            name: "rbd".into(),
            key: "pg_autoscale_mode".into(),
            value: "auto".into(),
        }));
        assert!(
            matches!(&e, crate::state::MonResponse::Err { message, .. } if message.contains("on, warn or off")),
            "{e:?}"
        );
    }

    #[test]
    fn a_new_pool_takes_the_default_mode_named_and_refuses_an_unknown_one() {
        let mut s = state();
        let create = |mode: &str| {
            MonRequest::Osd(OsdChange::PoolCreate {
                name: format!("p-{mode}"),
                pg_num: 8,
                spec: crate::osdmap::PoolSpec::Replicated {
                    size: 2,
                    min_size: 1,
                },
                autoscale_mode: Some(mode.into()),
                set: Vec::new(),
            })
        };
        for mode in ["on", "warn", "off"] {
            let r = s.apply(&create(mode));
            assert!(matches!(r, crate::state::MonResponse::Ok(_)), "{r:?}");
            let map = s.osdmap.current().unwrap();
            let p = map.pool_by_name(&format!("p-{mode}")).unwrap();
            assert_eq!(p.autoscale_mode().as_str(), mode);
        }
        let e = s.apply(&create("sometimes"));
        assert!(
            matches!(&e, crate::state::MonResponse::Err { message, .. }
                if message.contains("osd_pool_default_pg_autoscale_mode")),
            "{e:?}"
        );
    }

    /// A pool of 4 PGs and 2 copies made with the properties `set`.
    fn create_with(
        s: &mut MonState,
        name: &str,
        set: &[(&str, &str)],
    ) -> crate::state::MonResponse {
        s.apply(&MonRequest::Osd(OsdChange::PoolCreate {
            name: name.into(),
            pg_num: 4,
            spec: crate::osdmap::PoolSpec::Replicated {
                size: 2,
                min_size: 1,
            },
            autoscale_mode: None,
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }))
    }

    fn refused(s: &mut MonState, key: &str, value: &str, why: &str) {
        let e = s.apply(&MonRequest::Osd(OsdChange::PoolSet {
            name: "rbd".into(),
            key: key.into(),
            value: value.into(),
        }));
        assert!(
            matches!(&e, crate::state::MonResponse::Err { message, .. } if message.contains(why)),
            "{key}={value}: {e:?}"
        );
    }

    #[test]
    fn what_the_operator_says_of_a_pool_sizes_it() {
        let ratios = FullRatios::default();
        let rbd = |s: &MonState| status(s, &SETTINGS).unwrap().pools[0].clone();
        // Empty rbd (3 copies, 3 OSDs of 10 000 bytes, a budget of 300):
        // its floor, 8.
        let mut s = state();
        fill(&mut s, 0, 9000);
        assert_eq!(rbd(&s).pg_num_ideal, 8);
        // Expected to hold 5 000 bytes: 15 000 raw of 30 000, half the
        // budget over 3 copies, 50 -> 64 PGs, grown now.
        set(&mut s, "target_size_bytes", "5000");
        let a = rbd(&s);
        assert_eq!(
            (a.target_bytes, a.pg_num_ideal, a.would_adjust),
            (5000, 64, true)
        );
        assert!((a.final_ratio - 0.5).abs() < 1e-9, "{a:?}");
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), Some((1, 64)));
        // ... but never past its pg_num_max.
        set(&mut s, "pg_num_max", "32");
        assert_eq!(rbd(&s).pg_num_ideal, 32);
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), Some((1, 32)));
        set(&mut s, "pg_num_max", "0");
        set(&mut s, "target_size_bytes", "0");
        // The only pool with a ratio takes the whole capacity: 100 -> 128.
        set(&mut s, "target_size_ratio", "0.2");
        let a = rbd(&s);
        assert_eq!(a.target_ratio, 0.2);
        assert!((a.effective_target_ratio - 1.0).abs() < 1e-9, "{a:?}");
        assert_eq!(a.pg_num_ideal, 128);
        set(&mut s, "target_size_ratio", "0");
        // A pg_num_min above pg_num is grown to, within the threshold.
        set(&mut s, "pg_num_min", "16");
        let a = rbd(&s);
        assert_eq!((a.pg_num_ideal, a.would_adjust), (16, true));
        assert_eq!(next_growth(&s, &SETTINGS, &ratios), Some((1, 16)));
        // A bulk pool made beside it, with the properties in the same
        // change: an even share of what rbd leaves (all of it), over 2
        // copies: 150 -> 128.
        let r = create_with(
            &mut s,
            "big",
            &[("bulk", "true"), ("pg_autoscale_mode", "warn")],
        );
        assert!(matches!(r, crate::state::MonResponse::Ok(_)), "{r:?}");
        let v = status(&s, &SETTINGS).unwrap();
        let big = v
            .pools
            .iter()
            .find(|p| p.pool_name == "big")
            .unwrap()
            .clone();
        assert_eq!((big.pool_name.as_str(), big.bulk), ("big", true));
        assert_eq!(big.pg_autoscale_mode, "warn");
        assert_eq!(big.pg_num_ideal, 128);
        assert!((big.final_ratio - 1.0).abs() < 1e-9, "{big:?}");
        assert_eq!(health(&s)[0].code, "POOL_TOO_FEW_PGS");
        // What is out of range, or not a creation's, is refused whole.
        refused(&mut s, "pg_num_max", "12", "at least pg_num_min");
        refused(&mut s, "pg_num_min", "70000", "pg_num_min must be");
        set(&mut s, "pg_num_min", "0");
        refused(&mut s, "pg_num_max", "4", "merging");
        refused(&mut s, "target_size_ratio", "-1", "from 0");
        refused(&mut s, "target_size_ratio", "NaN", "from 0");
        refused(&mut s, "target_size_bytes", "lots", "whole number");
        refused(&mut s, "bulk", "maybe", "true or false");
        set(&mut s, "pg_num_max", "16");
        refused(&mut s, "pg_num", "32", "pg_num_max 16");
        let e = create_with(&mut s, "odd", &[("size", "1")]);
        assert!(
            matches!(&e, crate::state::MonResponse::Err { message, .. } if message.contains("created with")),
            "{e:?}"
        );
        assert!(s.osdmap.current().unwrap().pool_by_name("odd").is_none());
    }
}
