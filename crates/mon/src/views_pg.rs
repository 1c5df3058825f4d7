//! Read-only views of the PG statistics OSDs report (`shoal pg dump`,
//! `pg stat`, `df`) and the PG health checks, as Ceph shows them. Each
//! returns JSON; the CLI renders it as text.
//!
//! A PG never reported is `unknown`; a PG whose reporter is down or no
//! longer its acting primary is `stale+<state>`: the numbers are the last
//! known until the new primary reports.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use shoal_crush::{CrushMap, Workspace};
use shoal_maps::{OsdMap, PgId, PgMapping, Pool, PoolKind};

use crate::pgstats::PgStatEntry;
use crate::state::MonState;
use shoal_monclient::replies::{
    DF_VERSION, DfReply, DfStats, HealthCheck, OsdSpace, PG_DUMP_VERSION, PG_STAT_VERSION,
    PgDumpEntry, PgDumpReply, PgStatReply, PgStateCount, PoolDf, PoolQuota, PoolUsage,
};
use shoal_monclient::{ErrorCode, MonError};

/// Most items a health check lists in its detail.
const HEALTH_DETAIL_MAX: usize = 50;

/// One PG as the views show it.
#[derive(Debug, Clone, PartialEq)]
struct PgRow {
    pgid: PgId,
    state: String,
    entry: Option<PgStatEntry>,
    up: Vec<i32>,
    acting: Vec<i32>,
    up_primary: i32,
    acting_primary: i32,
}

impl PgRow {
    fn dump(&self) -> PgDumpEntry {
        let r = self.entry.as_ref().map(|e| &e.report);
        PgDumpEntry {
            pgid: self.pgid.to_string(),
            state: self.state.clone(),
            objects: r.map_or(0, |r| r.objects),
            bytes: r.map_or(0, |r| r.bytes),
            version: r.map_or("0'0", |r| r.version.as_str()).to_string(),
            log_size: r.map_or(0, |r| r.log_size),
            up: r.map_or(&self.up, |r| &r.up).clone(),
            acting: r.map_or(&self.acting, |r| &r.acting).clone(),
            up_primary: self.up_primary,
            acting_primary: self.acting_primary,
            reporter: self.entry.as_ref().map(|e| e.reporter),
            reported_epoch: self.entry.as_ref().map(|e| e.epoch),
        }
    }
}

/// Where `pgid` maps now and what its last report says about it.
fn row(map: &OsdMap, weights: &[u32], ws: &mut Workspace, pgid: PgId, state: &MonState) -> PgRow {
    // Only PGs of existing pools get here; a failure maps nowhere.
    let m = map
        .pg_to_up_acting_with(pgid, weights, ws)
        .unwrap_or(PgMapping {
            up_primary: -1,
            acting_primary: -1,
            ..PgMapping::default()
        });
    let entry = state.pg_stats.get(&pgid.to_string()).cloned();
    let state = match &entry {
        None => "unknown".to_string(),
        // A report from another primary, a down one, or of another acting
        // set describes an earlier interval, not the PG as it is now.
        Some(e)
            if e.reporter != m.acting_primary
                || !map.is_up(e.reporter)
                || e.report.acting != m.acting =>
        {
            format!("stale+{}", e.report.state)
        }
        Some(e) => e.report.state.clone(),
    };
    PgRow {
        pgid,
        state,
        entry,
        up: m.up,
        acting: m.acting,
        up_primary: m.up_primary,
        acting_primary: m.acting_primary,
    }
}

/// Every PG of every pool in the current map, in pool then seed order.
fn all_rows(state: &MonState) -> Result<(&OsdMap, Vec<PgRow>), MonError> {
    let map = state.osdmap.current()?;
    let weights = map.crush_weights();
    let mut ws = Workspace::default();
    let mut rows = Vec::new();
    for pool in map.pools().values() {
        for seed in 0..pool.pg_num {
            let pgid = PgId {
                pool: pool.id,
                seed,
            };
            rows.push(row(map, &weights, &mut ws, pgid, state));
        }
    }
    Ok((map, rows))
}

/// Cluster space from the OSDs' reports: (total, used, available).
pub(crate) fn raw_space(state: &MonState) -> (u64, u64, u64) {
    state
        .osd_statfs
        .values()
        .fold((0u64, 0u64, 0u64), |(t, u, a), s| {
            (
                t.saturating_add(s.total_bytes),
                u.saturating_add(s.used_bytes),
                a.saturating_add(s.available_bytes),
            )
        })
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// `pg dump`: every PG with its stats, and each OSD's space.
pub fn pg_dump(state: &MonState) -> Result<PgDumpReply, MonError> {
    let (map, rows) = all_rows(state)?;
    let osd_stats = state
        .osd_statfs
        .iter()
        .map(|(id, s)| OsdSpace {
            osd: *id,
            up: map.is_up(*id),
            total_bytes: s.total_bytes,
            used_bytes: s.used_bytes,
            available_bytes: s.available_bytes,
        })
        .collect();
    Ok(PgDumpReply {
        version: PG_DUMP_VERSION,
        epoch: map.epoch.0,
        pg_stats: rows.iter().map(PgRow::dump).collect(),
        osd_stats,
    })
}

/// `pg stat`: how many PGs are in each state, objects and bytes.
pub fn pg_stat(state: &MonState) -> Result<PgStatReply, MonError> {
    let (map, rows) = all_rows(state)?;
    let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &rows {
        *by_state.entry(r.state.as_str()).or_default() += 1;
    }
    let mut by_state: Vec<(&str, u64)> = by_state.into_iter().collect();
    // Most common first, as Ceph lists them.
    by_state.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let reports = rows.iter().filter_map(|r| r.entry.as_ref());
    let (objects, bytes) = reports.fold((0u64, 0u64), |(o, b), e| {
        (
            o.saturating_add(e.report.objects),
            b.saturating_add(e.report.bytes),
        )
    });
    let (copies, degraded) = degraded_copies(map, &rows);
    let misplaced = misplaced_copies(&rows);
    let (total, used, avail) = raw_space(state);
    let (left, per_s) =
        rows.iter()
            .filter_map(|r| r.entry.as_ref())
            .fold((0u64, 0u64), |(l, p), e| {
                (
                    l.saturating_add(e.report.recovery_left),
                    p.saturating_add(e.report.recovery_per_s),
                )
            });
    Ok(PgStatReply {
        version: PG_STAT_VERSION,
        epoch: map.epoch.0,
        num_pgs: rows.len() as u64,
        num_pg_by_state: by_state
            .iter()
            .map(|(s, n)| PgStateCount {
                name: s.to_string(),
                num: *n,
            })
            .collect(),
        num_objects: objects,
        num_bytes: bytes,
        num_object_copies: copies,
        num_objects_degraded: degraded,
        num_objects_misplaced: misplaced,
        raw_bytes: total,
        raw_bytes_used: used,
        raw_bytes_avail: avail,
        recovery_objects_left: left,
        recovery_objects_per_s: per_s,
    })
}

/// Whether every PG of `pool` is active as reported at epoch `since` or
/// later (a step of its placement is seen through), and the share of the
/// cluster's object copies misplaced.
pub fn pool_active_since(state: &MonState, pool: u64, since: u32) -> Option<f64> {
    let (map, rows) = all_rows(state).ok()?;
    let settled = rows.iter().filter(|r| r.pgid.pool == pool).all(|r| {
        r.entry.as_ref().is_some_and(|e| e.epoch >= since)
            && r.state.split('+').any(|s| s == "active")
    });
    if !settled {
        return None;
    }
    let (copies, _) = degraded_copies(map, &rows);
    Some(misplaced_copies(&rows) as f64 / copies.max(1) as f64)
}

/// Whether every PG of `pool` is reported active+clean as of now.
pub fn pool_clean(state: &MonState, pool: u64) -> bool {
    all_rows(state).is_ok_and(|(_, rows)| {
        rows.iter()
            .filter(|r| r.pgid.pool == pool)
            .all(|r| r.state == "active+clean")
    })
}

/// A PG's intervals since `since` (`pg past-intervals`): what peering
/// must hear from.
pub fn past_intervals(state: &MonState, pgid: &str, since: u32) -> Result<Value, MonError> {
    let pg: PgId = pgid
        .parse()
        .map_err(|_| MonError::new(ErrorCode::InvalidArgument, format!("bad pg id {pgid:?}")))?;
    let (from, intervals) = state.osdmap.past_intervals(pg, since)?;
    let list: Vec<Value> = intervals
        .iter()
        .map(|i| {
            json!({
                "first": i.first,
                "last": i.last,
                "up": i.up,
                "acting": i.acting,
                "primary": i.primary,
                "maybe_went_rw": i.maybe_went_rw,
            })
        })
        .collect();
    Ok(json!({
        "pgid": pg.to_string(),
        "from": from,
        "complete": from <= since.max(1),
        "intervals": list,
    }))
}

/// Object copies the pools want, and how many of them are missing (Ceph's
/// "degraded", as each PG's primary counts them: copies of absent acting
/// members and copies members still lack).
fn degraded_copies(map: &OsdMap, rows: &[PgRow]) -> (u64, u64) {
    let mut copies = 0u64;
    let mut degraded = 0u64;
    for r in rows {
        let (Some(e), Some(pool)) = (&r.entry, map.pool(r.pgid.pool)) else {
            continue;
        };
        let want = u64::from(pool.size);
        copies = copies.saturating_add(e.report.objects.saturating_mul(want));
        degraded = degraded.saturating_add(e.report.degraded);
    }
    (copies, degraded)
}

/// Object copies backfill targets still lack while the acting set holds
/// them (Ceph's "misplaced").
fn misplaced_copies(rows: &[PgRow]) -> u64 {
    rows.iter()
        .filter_map(|r| r.entry.as_ref())
        .fold(0u64, |n, e| n.saturating_add(e.report.misplaced))
}

/// Raw bytes a pool uses per byte stored: its size for replicated pools,
/// (k+m)/k for erasure-coded ones.
pub(crate) fn raw_per_stored(pool: &Pool) -> f64 {
    match pool.kind {
        PoolKind::Replicated => f64::from(pool.size.max(1)),
        PoolKind::Erasure { k, m } => f64::from(k + m) / f64::from(k.max(1)),
    }
}

/// An OSD's CRUSH weight (16.16): its weight in its bucket, 0 when it is
/// not in the hierarchy.
fn crush_weight(crush: &CrushMap, osd: i32) -> u32 {
    crush
        .buckets()
        .filter(|b| !b.is_shadow())
        .find_map(|b| {
            let at = b.items.iter().position(|i| *i == osd)?;
            b.weights.get(at).copied()
        })
        .unwrap_or(0)
}

/// Raw bytes that can still be written before the first OSD fills, as
/// Ceph projects MAX AVAIL: data spreads by weight (CRUSH weight times
/// reweight), so the OSD with the least space for its share bounds the
/// whole. OSDs that are out or have not reported take no data.
fn projected_raw_avail(state: &MonState, map: &OsdMap) -> u64 {
    let osds: Vec<(u64, f64)> = state
        .osd_statfs
        .iter()
        .filter_map(|(id, s)| {
            let o = map.osd(*id).filter(|o| o.exists && o.weight > 0)?;
            let w = f64::from(crush_weight(map.crush(), *id)) * f64::from(o.weight);
            Some((s.available_bytes, w))
        })
        .collect();
    let total_weight: f64 = osds.iter().map(|(_, w)| w).sum();
    if total_weight <= 0.0 {
        return osds.iter().map(|(a, _)| *a).sum();
    }
    osds.iter()
        .filter(|(_, w)| *w > 0.0)
        .map(|(a, w)| *a as f64 / (w / total_weight))
        .fold(f64::INFINITY, f64::min) as u64
}

/// Each pool's stored bytes and objects, from the PG reports: pool id →
/// (bytes, objects).
pub fn pool_usage(state: &MonState) -> BTreeMap<u64, (u64, u64)> {
    let mut stored: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (pgid, e) in &state.pg_stats {
        let Ok(id) = pgid.parse::<PgId>() else {
            continue;
        };
        let s = stored.entry(id.pool).or_default();
        s.0 = s.0.saturating_add(e.report.bytes);
        s.1 = s.1.saturating_add(e.report.objects);
    }
    stored
}

/// The pools whose quota state should change: (name, full now), for
/// the pools whose usage reached their quota without the flag, or went
/// back under it with the flag.
pub fn quota_changes(state: &MonState) -> Vec<(String, bool)> {
    let Ok(map) = state.osdmap.current() else {
        return Vec::new();
    };
    let usage = pool_usage(state);
    map.pools()
        .values()
        .filter_map(|p| {
            let (bytes, objects) = usage.get(&p.id).copied().unwrap_or_default();
            let full = (p.quota_max_bytes > 0 && bytes >= p.quota_max_bytes)
                || (p.quota_max_objects > 0 && objects >= p.quota_max_objects);
            (full != p.full_quota()).then(|| (p.name.clone(), full))
        })
        .collect()
}

/// `df`: raw space in total (from the OSDs' reports), and per pool what
/// is stored, the raw space it takes, and what can still be stored.
pub fn df(state: &MonState) -> Result<Value, MonError> {
    serde_json::to_value(df_reply(state)?)
        .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))
}

/// `df` typed (schema in docs/mon-replies.md).
pub fn df_reply(state: &MonState) -> Result<DfReply, MonError> {
    let map = state.osdmap.current()?;
    let (total, used, avail) = raw_space(state);
    let raw_avail = projected_raw_avail(state, map);
    let stored = pool_usage(state);
    let pools = map
        .pools()
        .values()
        .map(|p| {
            let (bytes, objects) = stored.get(&p.id).copied().unwrap_or_default();
            let raw = raw_per_stored(p);
            let bytes_used = (bytes as f64 * raw) as u64;
            let max_avail = (raw_avail as f64 / raw) as u64;
            let denominator = bytes_used as f64 + max_avail as f64 * raw;
            let percent_used = if denominator > 0.0 {
                bytes_used as f64 / denominator
            } else {
                0.0
            };
            PoolDf {
                name: p.name.clone(),
                id: p.id,
                pg_num: p.pg_num,
                quota: PoolQuota {
                    max_bytes: p.quota_max_bytes,
                    max_objects: p.quota_max_objects,
                    full: p.full_quota(),
                },
                stats: PoolUsage {
                    stored: bytes,
                    objects,
                    bytes_used,
                    percent_used,
                    max_avail,
                },
            }
        })
        .collect();
    Ok(DfReply {
        version: DF_VERSION,
        epoch: map.epoch.0,
        stats: DfStats {
            total_bytes: total,
            total_avail_bytes: avail,
            total_used_raw_bytes: used,
            total_used_raw_ratio: ratio(used, total),
            num_osds: state.osd_statfs.len() as u64,
        },
        pools,
    })
}

/// Health checks from the PG reports, as Ceph names them: PGs not active
/// or stale (`PG_AVAILABILITY`), PGs degraded or undersized
/// (`PG_DEGRADED`). PGs never reported are not counted: a pool with no
/// OSD reporting yet is not an error of the monitors' making.
pub fn pg_health(state: &MonState) -> Vec<HealthCheck> {
    let Ok(map) = state.osdmap.current() else {
        return Vec::new();
    };
    let weights = map.crush_weights();
    let mut ws = Workspace::default();
    let rows: Vec<PgRow> = state
        .pg_stats
        .keys()
        .filter_map(|k| k.parse::<PgId>().ok())
        .map(|pgid| row(map, &weights, &mut ws, pgid, state))
        .collect();
    let has = |r: &PgRow, s: &str| r.state.split('+').any(|p| p == s);
    let mut checks = Vec::new();
    let inactive: Vec<&PgRow> = rows.iter().filter(|r| !has(r, "active")).collect();
    let stale: Vec<&PgRow> = rows.iter().filter(|r| has(r, "stale")).collect();
    if !inactive.is_empty() || !stale.is_empty() {
        let mut parts = Vec::new();
        if !inactive.is_empty() {
            parts.push(count(inactive.len(), "inactive"));
        }
        if !stale.is_empty() {
            parts.push(count(stale.len(), "stale"));
        }
        let mut affected = inactive.clone();
        affected.extend(stale.iter().filter(|r| has(r, "active")));
        checks.push(check(
            "PG_AVAILABILITY",
            &format!("Reduced data availability: {}", parts.join(", ")),
            &affected,
        ));
    }
    let degraded: Vec<&PgRow> = rows.iter().filter(|r| has(r, "degraded")).collect();
    let undersized: Vec<&PgRow> = rows.iter().filter(|r| has(r, "undersized")).collect();
    if !degraded.is_empty() || !undersized.is_empty() {
        let mut parts = Vec::new();
        let (copies, missing) = degraded_copies(map, &rows);
        if missing > 0 {
            parts.push(format!(
                "{missing}/{copies} objects degraded ({:.3}%)",
                missing as f64 * 100.0 / copies.max(1) as f64
            ));
        }
        if !degraded.is_empty() {
            parts.push(count(degraded.len(), "degraded"));
        }
        if !undersized.is_empty() {
            parts.push(count(undersized.len(), "undersized"));
        }
        let affected: Vec<&PgRow> = rows
            .iter()
            .filter(|r| has(r, "degraded") || has(r, "undersized"))
            .collect();
        checks.push(check(
            "PG_DEGRADED",
            &format!("Degraded data redundancy: {}", parts.join(", ")),
            &affected,
        ));
    }
    let misplaced = misplaced_copies(&rows);
    if misplaced > 0 {
        let (copies, _) = degraded_copies(map, &rows);
        let affected: Vec<&PgRow> = rows.iter().filter(|r| has(r, "remapped")).collect();
        checks.push(check(
            "OBJECT_MISPLACED",
            &format!(
                "{misplaced}/{copies} objects misplaced ({:.3}%)",
                misplaced as f64 * 100.0 / copies.max(1) as f64
            ),
            &affected,
        ));
    }
    if let Some(c) = recovery_stalled(&rows) {
        checks.push(c);
    }
    let damaged: Vec<&PgRow> = rows.iter().filter(|r| has(r, "inconsistent")).collect();
    if !damaged.is_empty() {
        let mut objects: Vec<String> = Vec::new();
        for r in &damaged {
            for o in r.entry.iter().flat_map(|e| &e.report.inconsistent) {
                objects.push(format!("pg {} has an inconsistent object {o}", r.pgid));
            }
        }
        let mut errors = check(
            "OSD_SCRUB_ERRORS",
            &format!("{} scrub errors", objects.len().max(damaged.len())),
            &[],
        );
        errors = errors.error();
        let more = objects.len().saturating_sub(HEALTH_DETAIL_MAX);
        objects.truncate(HEALTH_DETAIL_MAX);
        if more > 0 {
            objects.push(format!("... and {more} more"));
        }
        errors.detail = objects;
        checks.push(errors);
        let pgs = check(
            "PG_DAMAGED",
            &format!(
                "Possible data damage: {}",
                count(damaged.len(), "inconsistent")
            ),
            &damaged,
        );
        checks.push(pgs.error());
    }
    checks
}

/// `PG_RECOVERY_STALLED`: PGs whose recovery of some object keeps
/// failing, naming each object and why, so an operator sees what holds a
/// PG degraded rather than a recovery that never ends.
fn recovery_stalled(rows: &[PgRow]) -> Option<HealthCheck> {
    let mut objects: Vec<String> = Vec::new();
    let mut pgs: Vec<&PgRow> = Vec::new();
    for r in rows {
        let stalled = r.entry.iter().flat_map(|e| &e.report.recovery_stalled);
        let before = objects.len();
        objects.extend(stalled.map(|o| format!("pg {} cannot recover object {o}", r.pgid)));
        if objects.len() > before {
            pgs.push(r);
        }
    }
    if pgs.is_empty() {
        return None;
    }
    let summary = format!(
        "Recovery stalled: {} objects failing to recover in {}",
        objects.len(),
        count(pgs.len(), "")
    );
    let mut c = check("PG_RECOVERY_STALLED", summary.trim_end(), &pgs);
    let more = objects.len().saturating_sub(HEALTH_DETAIL_MAX);
    objects.truncate(HEALTH_DETAIL_MAX);
    if more > 0 {
        objects.push(format!("... and {more} more"));
    }
    c.detail = objects;
    Some(c)
}

fn count(n: usize, what: &str) -> String {
    let pgs = if n == 1 { "pg" } else { "pgs" };
    format!("{n} {pgs} {what}")
}

fn check(code: &str, summary: &str, rows: &[&PgRow]) -> HealthCheck {
    let mut detail: Vec<String> = rows
        .iter()
        .take(HEALTH_DETAIL_MAX)
        .map(|r| {
            let acting = r.entry.as_ref().map_or(&r.acting, |e| &e.report.acting);
            format!("pg {} is {}, acting {acting:?}", r.pgid, r.state)
        })
        .collect();
    if rows.len() > HEALTH_DETAIL_MAX {
        detail.push(format!("... and {} more", rows.len() - HEALTH_DETAIL_MAX));
    }
    HealthCheck::warn(code, summary, detail)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::osdmap::OsdChange;
    use crate::pgstats::{OsdStatfs, PgStatReport, PgStats, record};

    pub(crate) fn state() -> MonState {
        MonState {
            fsid: "f".into(),
            osdmap: crate::pgstats::tests::cluster(),
            ..MonState::default()
        }
    }

    pub(crate) fn primary(s: &MonState, pgid: &str) -> i32 {
        let map = s.osdmap.current().unwrap();
        map.pg_to_up_acting(pgid.parse().unwrap())
            .unwrap()
            .acting_primary
    }

    pub(crate) fn report(s: &mut MonState, id: i32, avail: u64, pgs: &[(&str, &str, u64)]) {
        let map = s.osdmap.current().unwrap().clone();
        // The report describes the PG as the current map places it.
        let acting = |pgid: &str| map.pg_to_up_acting(pgid.parse().unwrap()).unwrap().acting;
        let pgs = pgs
            .iter()
            .map(|(pgid, state, objects)| PgStatReport {
                pgid: (*pgid).into(),
                state: (*state).into(),
                objects: *objects,
                bytes: objects * 1000,
                version: "5'3".into(),
                up: acting(pgid),
                acting: acting(pgid),
                log_size: 3,
                inconsistent: if state.contains("inconsistent") {
                    vec!["obj-a".into()]
                } else {
                    Vec::new()
                },
                recovery_left: if state.contains("recovering") {
                    5
                } else if state.contains("remapped") {
                    4
                } else {
                    0
                },
                recovery_per_s: if state.contains("recovering") { 2 } else { 0 },
                degraded: objects * (3 - acting(pgid).len() as u64)
                    + if state.contains("recovering") { 5 } else { 0 },
                misplaced: if state.contains("remapped") { 4 } else { 0 },
                recovery_stalled: if state.contains("recovering") && *objects > 100 {
                    vec!["big-obj: push to osd.2: frame too large (3 failed tries in 7 s)".into()]
                } else {
                    Vec::new()
                },
            })
            .collect();
        let r = PgStats {
            id,
            epoch: s.osdmap.epoch(),
            statfs: OsdStatfs {
                total_bytes: 10_000,
                used_bytes: 10_000 - avail,
                available_bytes: avail,
            },
            pgs,
        };
        let map = s.osdmap.current().unwrap().clone();
        record(&mut s.pg_stats, &mut s.osd_statfs, &map, &r).unwrap();
    }

    fn states(dump: &PgDumpReply) -> BTreeMap<String, String> {
        dump.pg_stats
            .iter()
            .map(|p| (p.pgid.clone(), p.state.clone()))
            .collect()
    }

    #[test]
    fn dump_shows_unknown_reported_and_stale() {
        let mut s = state();
        let p0 = primary(&s, "1.0");
        let p1 = primary(&s, "1.1");
        let other = (0..3).find(|o| *o != p1).unwrap();
        report(&mut s, p0, 9000, &[("1.0", "active+clean", 2)]);
        // A report from an OSD that is not the PG's primary is stale.
        report(&mut s, other, 9000, &[("1.1", "active+clean", 1)]);
        let d = pg_dump(&s).unwrap();
        let st = states(&d);
        assert_eq!(st.len(), 16);
        assert_eq!(st["1.0"], "active+clean");
        // A report of another acting set describes an earlier interval.
        let mut old = s.pg_stats["1.0"].clone();
        old.report.acting.reverse();
        old.report.acting.push(99);
        let mut s2 = s.clone();
        s2.pg_stats.insert("1.0".into(), old);
        assert_eq!(states(&pg_dump(&s2).unwrap())["1.0"], "stale+active+clean");
        assert_eq!(st["1.1"], "stale+active+clean");
        assert_eq!(st["2.7"], "unknown");
        let first = &d.pg_stats[0];
        assert_eq!((first.objects, first.bytes), (2, 2000));
        assert_eq!(first.reporter, Some(p0));
        // Its primary goes down: stale too.
        s.apply(&crate::state::MonRequest::Osd(OsdChange::MarkDown {
            ids: vec![p0],
        }));
        assert!(s.osdmap.current().unwrap().osd(p0).is_some_and(|o| !o.up));
        let st = states(&pg_dump(&s).unwrap());
        assert_eq!(st["1.0"], "stale+active+clean");
    }

    #[test]
    fn pg_stat_counts_states_objects_and_bytes() {
        let mut s = state();
        let p = primary(&s, "2.3");
        report(&mut s, p, 9000, &[("2.3", "active+clean", 4)]);
        let p = primary(&s, "2.4");
        report(&mut s, p, 9000, &[("2.4", "peering", 1)]);
        let v = pg_stat(&s).unwrap();
        assert_eq!(v.num_pgs, 16);
        let states: Vec<(&str, u64)> = v
            .num_pg_by_state
            .iter()
            .map(|s| (s.name.as_str(), s.num))
            .collect();
        assert_eq!(
            states,
            vec![("unknown", 14), ("active+clean", 1), ("peering", 1)]
        );
        assert_eq!((v.num_objects, v.num_bytes), (5, 5000));
    }

    #[test]
    fn df_totals_raw_use_and_max_avail() {
        let mut s = state();
        // Three OSDs of equal weight with 9000, 8000 and 7000 bytes free:
        // data spreads evenly, so the fullest bounds the whole at 3 x 7000.
        let pgs_of = |s: &MonState, osd: i32| -> Vec<String> {
            (0..8)
                .map(|seed| format!("1.{seed:x}"))
                .filter(|pg| primary(s, pg) == osd)
                .collect()
        };
        for (osd, avail) in [(0, 9000), (1, 8000), (2, 7000)] {
            let pgs = pgs_of(&s, osd);
            let pgs: Vec<(&str, &str, u64)> = pgs
                .iter()
                .map(|p| (p.as_str(), "active+clean", 1))
                .collect();
            report(&mut s, osd, avail, &pgs);
        }
        let v = df(&s).unwrap();
        let st = &v["stats"];
        assert_eq!(st["total_bytes"], 30_000);
        assert_eq!(st["total_avail_bytes"], 24_000);
        assert_eq!(st["total_used_raw_bytes"], 6_000);
        assert!((st["total_used_raw_ratio"].as_f64().unwrap() - 0.2).abs() < 1e-9);
        let rbd = &v["pools"][0]["stats"];
        // 8 PGs of one object of 1000 bytes each, three copies.
        assert_eq!(rbd["stored"], 8000);
        assert_eq!(rbd["objects"], 8);
        assert_eq!(rbd["bytes_used"], 24_000);
        assert_eq!(rbd["max_avail"], 7000);
        let pct = rbd["percent_used"].as_f64().unwrap();
        assert!(
            (pct - 24_000.0 / (24_000.0 + 21_000.0)).abs() < 1e-9,
            "{pct}"
        );
        assert_eq!(v["pools"][1]["stats"]["stored"], 0);
        // An OSD marked out takes no new data.
        s.apply(&crate::state::MonRequest::Osd(OsdChange::MarkOut {
            ids: vec![2],
        }));
        assert_eq!(
            df(&s).unwrap()["pools"][0]["stats"]["max_avail"],
            8000 * 2 / 3
        );
        // Erasure coding k=2 m=1 takes 1.5 raw bytes per byte stored.
        let ec = Pool::erasure(9, "ec", 2, 1, 8, 1);
        assert!((raw_per_stored(&ec) - 1.5).abs() < 1e-9);
    }

    #[test]
    fn health_warns_of_inactive_stale_and_degraded_pgs() {
        let mut s = state();
        assert!(pg_health(&s).is_empty());
        let (a, b, c) = (primary(&s, "1.0"), primary(&s, "1.1"), primary(&s, "1.2"));
        report(&mut s, a, 9000, &[("1.0", "peering", 0)]);
        report(&mut s, b, 9000, &[("1.1", "active+undersized+degraded", 0)]);
        report(&mut s, c, 9000, &[("1.2", "active+clean", 0)]);
        let checks = pg_health(&s);
        let codes: Vec<&str> = checks.iter().map(|c| c.code.as_str()).collect();
        assert_eq!(codes, ["PG_AVAILABILITY", "PG_DEGRADED"]);
        assert_eq!(
            checks[0].summary,
            "Reduced data availability: 1 pg inactive"
        );
        assert_eq!(
            checks[1].summary,
            "Degraded data redundancy: 1 pg degraded, 1 pg undersized"
        );
        assert!(
            checks[0].detail[0]
                .as_str()
                .starts_with("pg 1.0 is peering")
        );
        let h = crate::views::health(&s, &[], &[], 0, &crate::views_space::FullRatios::default());
        assert_eq!(h.status, "HEALTH_WARN");
    }

    #[test]
    fn space_checks_escalate_with_use_and_clear_when_freed() {
        let ratios = crate::views_space::FullRatios::default();
        let codes = |s: &MonState| -> Vec<(String, String)> {
            crate::views::health(s, &[], &[], 0, &ratios)
                .checks
                .iter()
                .map(|c| {
                    let d = c.detail.first().cloned().unwrap_or_default();
                    (c.code.clone(), d)
                })
                .collect()
        };
        let mut s = state();
        let a = primary(&s, "1.0");
        report(&mut s, a, 9000, &[("1.0", "active+clean", 0)]);
        assert!(codes(&s).is_empty(), "{:?}", codes(&s));
        // 86 % used: nearfull, and so is the pool on it.
        report(&mut s, a, 1400, &[("1.0", "active+clean", 0)]);
        let c = codes(&s);
        assert_eq!(c[0].0, "OSD_NEARFULL");
        assert_eq!(
            c[0].1,
            format!("osd.{a} is nearfull: 86.0% used (0.0 MiB of 0.0 MiB)")
        );
        assert_eq!(c[1].0, "POOL_NEARFULL");
        assert!(c[1].1.starts_with("pool 'rbd' is nearfull: osd."), "{c:?}");
        // 91 %: backfillfull (and no longer nearfull).
        report(&mut s, a, 900, &[("1.0", "active+clean", 0)]);
        let c = codes(&s);
        assert_eq!(c[0].0, "OSD_BACKFILLFULL", "{c:?}");
        assert!(c.iter().all(|(code, _)| code != "OSD_NEARFULL"));
        // 96 %: full, an error; the pool is full.
        report(&mut s, a, 400, &[("1.0", "active+clean", 0)]);
        let c = codes(&s);
        assert_eq!(c[0].0, "OSD_FULL", "{c:?}");
        assert_eq!(c[1].0, "POOL_FULL");
        assert!(c[1].1.contains("is full (no space)"), "{c:?}");
        let h = crate::views::health(&s, &[], &[], 0, &ratios);
        assert_eq!(h.status, "HEALTH_ERR");
        // Freed: every space check clears.
        report(&mut s, a, 9000, &[("1.0", "active+clean", 0)]);
        assert!(codes(&s).is_empty(), "{:?}", codes(&s));
    }

    #[test]
    fn recovery_progress_adds_up_across_pgs() {
        let mut s = state();
        let a = primary(&s, "1.4");
        report(&mut s, a, 9000, &[("1.4", "recovering", 7)]);
        let b = primary(&s, "1.5");
        report(&mut s, b, 9000, &[("1.5", "recovering", 3)]);
        let v = pg_stat(&s).unwrap();
        assert_eq!(v.recovery_objects_left, 10, "{v:?}");
        assert_eq!(v.recovery_objects_per_s, 4, "{v:?}");
    }

    #[test]
    fn missing_copies_count_as_degraded_objects() {
        let mut s = state();
        // One OSD down: PGs on it have two acting members of three.
        let p = primary(&s, "1.2");
        let down = (0..3).find(|o| *o != p).unwrap();
        s.apply(&crate::state::MonRequest::Osd(OsdChange::MarkDown {
            ids: vec![down],
        }));
        report(
            &mut s,
            p,
            9000,
            &[("1.2", "active+undersized+degraded", 10)],
        );
        let v = pg_stat(&s).unwrap();
        assert_eq!(v.num_object_copies, 30, "{v:?}");
        assert_eq!(v.num_objects_degraded, 10, "{v:?}");
        let checks = pg_health(&s);
        let deg = checks.iter().find(|c| c.code == "PG_DEGRADED").unwrap();
        assert!(
            deg.summary
                .as_str()
                .starts_with("Degraded data redundancy: 10/30 objects degraded (33.333%)"),
            "{deg:?}"
        );
    }

    #[test]
    fn copies_an_acting_member_still_lacks_count_as_degraded() {
        let mut s = state();
        let p = primary(&s, "1.2");
        // Every acting member is there; one lacks 5 of the 10 objects.
        report(
            &mut s,
            p,
            9000,
            &[("1.2", "active+recovering+degraded", 10)],
        );
        let v = pg_stat(&s).unwrap();
        assert_eq!(v.num_object_copies, 30, "{v:?}");
        assert_eq!(v.num_objects_degraded, 5, "{v:?}");
    }

    #[test]
    fn copies_a_backfill_target_lacks_are_misplaced_not_degraded() {
        let mut s = state();
        let p = primary(&s, "1.2");
        report(
            &mut s,
            p,
            9000,
            &[("1.2", "active+remapped+backfilling", 10)],
        );
        let v = pg_stat(&s).unwrap();
        assert_eq!(v.num_objects_degraded, 0, "{v:?}");
        assert_eq!(v.num_objects_misplaced, 4, "{v:?}");
        let checks = pg_health(&s);
        let m = checks
            .iter()
            .find(|c| c.code == "OBJECT_MISPLACED")
            .unwrap();
        assert_eq!(m.summary, "4/30 objects misplaced (13.333%)", "{m:?}");
        assert!(
            !checks.iter().any(|c| c.code == "PG_DEGRADED"),
            "{checks:?}"
        );
    }

    #[test]
    fn a_stalled_recovery_is_a_health_warning_naming_the_object_and_why() {
        let mut s = state();
        let a = primary(&s, "1.3");
        report(
            &mut s,
            a,
            9000,
            &[("1.3", "active+recovering+degraded", 200)],
        );
        let checks = pg_health(&s);
        let stalled = checks
            .iter()
            .find(|c| c.code == "PG_RECOVERY_STALLED")
            .unwrap_or_else(|| panic!("{checks:?}"));
        assert_eq!(stalled.severity, "HEALTH_WARN");
        assert_eq!(
            stalled.summary,
            "Recovery stalled: 1 objects failing to recover in 1 pg"
        );
        assert_eq!(
            stalled.detail[0],
            "pg 1.3 cannot recover object big-obj: push to osd.2: frame too large (3 failed tries in 7 s)"
        );
        // A recovery that does not fail raises no such check.
        let mut s = state();
        report(&mut s, a, 9000, &[("1.3", "active+recovering+degraded", 2)]);
        assert!(
            !pg_health(&s)
                .iter()
                .any(|c| c.code == "PG_RECOVERY_STALLED")
        );
    }

    #[test]
    fn inconsistent_pgs_are_a_health_error_naming_the_objects() {
        let mut s = state();
        let a = primary(&s, "1.3");
        report(&mut s, a, 9000, &[("1.3", "active+clean+inconsistent", 2)]);
        let checks = pg_health(&s);
        let codes: Vec<&str> = checks.iter().map(|c| c.code.as_str()).collect();
        assert_eq!(codes, ["OSD_SCRUB_ERRORS", "PG_DAMAGED"]);
        assert_eq!(checks[0].summary, "1 scrub errors");
        assert_eq!(
            checks[0].detail[0],
            "pg 1.3 has an inconsistent object obj-a"
        );
        assert_eq!(checks[1].summary, "Possible data damage: 1 pg inconsistent");
        let h = crate::views::health(&s, &[], &[], 0, &crate::views_space::FullRatios::default());
        assert_eq!(h.status, "HEALTH_ERR");
    }
}
