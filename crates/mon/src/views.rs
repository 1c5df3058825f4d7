//! Read-only views of the OSD map for commands (`shoal osd tree`, `osd
//! dump`, `osd stat`, `osd pool ls|get`, `osd map`) and the `osdmap`
//! subscription payload. Each returns JSON; the CLI renders it as text.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use shoal_maps::{FLAG_EC_OVERWRITES, OsdMap, Pool, PoolKind};
use shoal_net::Secret;

use crate::osdmap::OsdMapState;
use crate::state::MonState;
use crate::views_space::FullRatios;
use shoal_monclient::OsdMapUpdate;
use shoal_monclient::replies::{
    HEALTH_VERSION, HealthCheck, HealthReply, MutedCheck, OSD_MAP_VERSION, OSD_STAT_VERSION,
    OSD_TREE_VERSION, OsdEntry, OsdMapReply, OsdStatReply, OsdTreeReply, POOL_VERSION, PoolReply,
    TreeNode,
};
use shoal_monclient::{ErrorCode, MonError};

fn fixed(w: u32) -> f64 {
    f64::from(w) / 65536.0
}

fn pool_reply(p: &Pool, crush: &shoal_crush::CrushMap) -> PoolReply {
    let (kind, k, m) = match p.kind {
        PoolKind::Replicated => ("replicated", None, None),
        PoolKind::Erasure { k, m } => ("erasure", Some(k), Some(m)),
    };
    PoolReply {
        version: POOL_VERSION,
        id: p.id,
        name: p.name.clone(),
        kind: kind.to_string(),
        size: p.size,
        min_size: p.min_size,
        k,
        m,
        pg_num: p.pg_num,
        pgp_num: p.pgp_num,
        crush_rule: crush
            .rule(p.crush_rule)
            .map(|r| r.name.clone())
            .unwrap_or_else(|| p.crush_rule.to_string()),
        erasure_code_profile: (!p.ec_profile.is_empty()).then(|| p.ec_profile.clone()),
        stripe_width: p.stripe_width,
        snap_seq: p.snap_seq,
        removed_snaps: p.removed_snaps.clone(),
        allow_ec_overwrites: p.is_erasure().then_some(p.flags & FLAG_EC_OVERWRITES != 0),
        quota_max_bytes: p.quota_max_bytes,
        quota_max_objects: p.quota_max_objects,
        full_quota: p.full_quota(),
        pg_autoscale_mode: p.autoscale_mode().to_string(),
        bulk: p.bulk(),
        pg_num_min: p.autoscale.pg_num_min,
        pg_num_max: p.autoscale.pg_num_max,
        target_size_bytes: p.autoscale.target_size_bytes,
        target_size_ratio: p.autoscale.target_size_ratio(),
    }
}

fn pool_json(p: &Pool, crush: &shoal_crush::CrushMap) -> Value {
    serde_json::to_value(pool_reply(p, crush)).unwrap_or(Value::Null)
}

/// `osd erasure-code-profile get NAME`.
pub fn ec_profile_get(state: &MonState, name: &str) -> Result<Value, MonError> {
    state
        .osdmap
        .ec_profiles
        .get(name)
        .map(|p| json!(p))
        .ok_or_else(|| {
            MonError::new(
                ErrorCode::NotFound,
                format!("erasure-code profile {name} does not exist"),
            )
        })
}

/// `osd erasure-code-profile ls`.
pub fn ec_profile_ls(state: &MonState) -> Value {
    json!(state.osdmap.ec_profiles.keys().collect::<Vec<_>>())
}

fn osd_entry(map: &OsdMap, id: i32) -> OsdEntry {
    let o = map.osd(id);
    OsdEntry {
        osd: id,
        up: map.is_up(id),
        is_in: o.is_some_and(|o| o.weight > 0),
        reweight: fixed(o.map_or(0, |o| o.weight)),
        primary_affinity: fixed(o.map_or(0, |o| o.primary_affinity)),
        addr: o.and_then(|o| o.addr.clone()),
    }
}

fn osd_json(map: &OsdMap, id: i32) -> Value {
    serde_json::to_value(osd_entry(map, id)).unwrap_or(Value::Null)
}

/// `osd dump`.
pub fn osd_dump(state: &MonState) -> Result<Value, MonError> {
    let map = state.osdmap.current()?;
    let pools: Vec<Value> = map
        .pools()
        .values()
        .map(|p| pool_json(p, map.crush()))
        .collect();
    let osds: Vec<Value> = map
        .osds()
        .filter(|(_, o)| o.exists)
        .map(|(id, _)| osd_json(map, id))
        .collect();
    let upmaps: Vec<Value> = map
        .pg_upmap_items()
        .iter()
        .map(|(pg, pairs)| {
            let m: Vec<Value> = pairs
                .iter()
                .map(|(from, to)| json!({"from": from, "to": to}))
                .collect();
            json!({"pgid": pg.to_string(), "mappings": m})
        })
        .collect();
    Ok(json!({
        "epoch": map.epoch.0,
        "fsid": state.fsid,
        "flags": state.osdmap.flags,
        "max_osd": map.max_osd(),
        "pools": pools,
        "osds": osds,
        "pg_upmap_items": upmaps,
    }))
}

/// `balancer status`: its settings (central configuration), the
/// `pg_upmap_items` in the map, and the spread of PG copies over the up and
/// in OSDs: each one's count beside its share, the largest deviation and
/// the standard deviation.
pub fn balancer_status(
    state: &MonState,
) -> Result<shoal_monclient::replies::BalancerStatusReply, MonError> {
    use shoal_monclient::replies::{BALANCER_STATUS_VERSION, BalancerOsd, BalancerStatusReply};
    let map = state.osdmap.current()?;
    let o = crate::service::leader_options(state)
        .ok_or_else(|| MonError::new(ErrorCode::Internal, "the balancer's options"))?;
    let pools: Vec<u64> = map.pools().keys().copied().collect();
    let spread = shoal_maps::balance::spread(map, &pools)
        .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))?;
    let osds: Vec<BalancerOsd> = spread
        .count
        .iter()
        .map(|(osd, n)| BalancerOsd {
            osd: *osd,
            pgs: *n,
            target: spread.target.get(osd).copied().unwrap_or(0.0),
        })
        .collect();
    let stddev = if osds.is_empty() {
        0.0
    } else {
        let sq: f64 = osds.iter().map(|o| (o.pgs as f64 - o.target).powi(2)).sum();
        (sq / osds.len() as f64).sqrt()
    };
    Ok(BalancerStatusReply {
        version: BALANCER_STATUS_VERSION,
        active: o.mon_balancer_active,
        mode: "upmap".into(),
        interval_ms: o.mon_balancer_interval_ms,
        max_deviation_allowed: o.mon_balancer_max_deviation,
        max_moves: o.mon_balancer_max_moves,
        pg_upmap_items: map.pg_upmap_items().len() as u64,
        osds,
        max_deviation: spread.max_deviation(),
        stddev,
    })
}

/// A typed reply as the JSON a command answers.
pub fn to_reply<T: serde::Serialize>(r: Result<T, MonError>) -> Result<Value, MonError> {
    serde_json::to_value(r?).map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))
}

/// `osd stat` typed (schema in docs/mon-replies.md).
pub fn osd_stat(state: &MonState) -> Result<OsdStatReply, MonError> {
    let map = state.osdmap.current()?;
    let exist: Vec<i32> = map
        .osds()
        .filter(|(_, o)| o.exists)
        .map(|(id, _)| id)
        .collect();
    let up = exist.iter().filter(|id| map.is_up(**id)).count();
    let inn = exist
        .iter()
        .filter(|id| map.osd(**id).is_some_and(|o| o.weight > 0))
        .count();
    Ok(OsdStatReply {
        version: OSD_STAT_VERSION,
        epoch: map.epoch.0,
        num_osds: exist.len() as u64,
        num_up_osds: up as u64,
        num_in_osds: inn as u64,
        flags: state.osdmap.flags.iter().cloned().collect(),
        num_pools: map.pools().len() as u64,
        num_pgs: map.pools().values().map(|p| u64::from(p.pg_num)).sum(),
    })
}

/// `osd tree`: the CRUSH hierarchy from each root, then OSDs in no bucket.
pub fn osd_tree(state: &MonState) -> Result<OsdTreeReply, MonError> {
    let map = state.osdmap.current()?;
    let crush = map.crush();
    let mut nodes = Vec::new();
    let mut placed = BTreeSet::new();
    // Depth-first from every (non-shadow) root.
    let mut stack: Vec<(i32, u32, usize)> =
        crush.roots().into_iter().rev().map(|r| (r, 0, 0)).collect();
    while let Some((id, weight, depth)) = stack.pop() {
        if id >= 0 {
            placed.insert(id);
            let fs = state.osd_statfs.get(&id);
            nodes.push(TreeNode {
                id,
                name: format!("osd.{id}"),
                kind: "osd".into(),
                crush_weight: fixed(weight),
                depth: depth as u64,
                class: crush.device(id).and_then(|d| d.class.clone()),
                osd: Some(osd_entry(map, id)),
                total_bytes: fs.map(|f| f.total_bytes),
                used_bytes: fs.map(|f| f.used_bytes),
            });
            continue;
        }
        let Some(b) = crush.bucket(id) else { continue };
        if b.is_shadow() {
            continue;
        }
        nodes.push(TreeNode {
            id,
            name: b.name.clone(),
            kind: crush.types().get(&b.type_id).cloned().unwrap_or_default(),
            crush_weight: fixed(b.weight()),
            depth: depth as u64,
            class: None,
            osd: None,
            total_bytes: None,
            used_bytes: None,
        });
        for (item, w) in b.items.iter().zip(&b.weights).rev() {
            stack.push((*item, *w, depth + 1));
        }
    }
    let stray = map
        .osds()
        .filter(|(id, o)| o.exists && !placed.contains(id))
        .map(|(id, _)| osd_entry(map, id))
        .collect();
    Ok(OsdTreeReply {
        version: OSD_TREE_VERSION,
        epoch: map.epoch.0,
        nodes,
        stray,
    })
}

/// `osd pool ls`.
pub fn pool_ls(state: &MonState) -> Result<Value, MonError> {
    let map = state.osdmap.current()?;
    Ok(json!(
        map.pools()
            .values()
            .map(|p| pool_json(p, map.crush()))
            .collect::<Vec<_>>()
    ))
}

/// `osd pool get NAME`.
pub fn pool_get(state: &MonState, name: &str) -> Result<Value, MonError> {
    let map = state.osdmap.current()?;
    let p = map
        .pool_by_name(name)
        .ok_or_else(|| MonError::new(ErrorCode::NotFound, format!("pool {name} does not exist")))?;
    Ok(pool_json(p, map.crush()))
}

/// `osd map POOL OBJECT`: object → PG → up and acting sets, as `ceph osd map`.
pub fn osd_map(
    state: &MonState,
    pool: &str,
    object: &str,
    namespace: &str,
) -> Result<OsdMapReply, MonError> {
    let map = state.osdmap.current()?;
    let p = map
        .pool_by_name(pool)
        .ok_or_else(|| MonError::new(ErrorCode::NotFound, format!("pool {pool} does not exist")))?;
    let raw = p.hash_key(object, namespace);
    let pg = p.raw_pg_to_pg(raw);
    let m = map
        .pg_to_up_acting(pg)
        .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))?;
    Ok(OsdMapReply {
        version: OSD_MAP_VERSION,
        epoch: map.epoch.0,
        pool: pool.to_string(),
        pool_id: p.id,
        objname: object.to_string(),
        namespace: namespace.to_string(),
        raw_pgid: format!("{}.{:x}", p.id, raw),
        pgid: pg.to_string(),
        up: m.up,
        up_primary: m.up_primary,
        acting: m.acting,
        acting_primary: m.acting_primary,
    })
}

/// The `osdmap` subscription payload for a subscriber at epoch `have`:
/// the incrementals after it, or the full map when they are no longer
/// all kept (or `have` is 0).
pub fn osdmap_update(s: &OsdMapState, have: u64) -> Vec<u8> {
    let epoch = u64::from(s.epoch());
    let oldest = s
        .incrementals
        .keys()
        .next()
        .map_or(u64::MAX, |e| u64::from(*e));
    if have > 0 && have + 1 >= oldest && have <= epoch {
        // Kept base64 in the replicated state (JSON); sent as bytes.
        let incs: Option<Vec<Vec<u8>>> = s
            .incrementals
            .range(u32::try_from(have + 1).unwrap_or(u32::MAX)..)
            .map(|(_, v)| Secret::decode_base64(v).ok())
            .collect();
        if let Some(incs) = incs {
            return OsdMapUpdate::encode_incrementals(incs.iter().map(Vec::as_slice));
        }
    }
    let full = s.map.as_ref().map(OsdMap::encode).unwrap_or_default();
    OsdMapUpdate::encode_full(&full)
}

/// The cluster's health: its status from the checks not muted at
/// `now_ms`, those checks, and the muted ones apart.
pub fn health(
    state: &MonState,
    mons_down: &[String],
    quorum: &[String],
    now_ms: u64,
    ratios: &FullRatios,
) -> HealthReply {
    let (muted, checks): (Vec<HealthCheck>, Vec<HealthCheck>) =
        raw_checks(state, mons_down, quorum, now_ms, ratios)
            .into_iter()
            .partition(|c| state.health.muted(&c.code, now_ms));
    let status = if checks.is_empty() {
        "HEALTH_OK"
    } else if checks.iter().any(|c| c.severity == "HEALTH_ERR") {
        "HEALTH_ERR"
    } else {
        "HEALTH_WARN"
    };
    let muted = muted
        .into_iter()
        .map(|c| {
            let m = state.health.mutes.get(&c.code);
            MutedCheck {
                muted_until_ms: m.and_then(|m| m.until_ms),
                sticky: m.is_some_and(|m| m.sticky),
                check: c,
            }
        })
        .collect();
    HealthReply {
        version: HEALTH_VERSION,
        status: status.to_string(),
        checks,
        muted,
    }
}

/// Every check, muted or not, as the leader records them.
pub fn checks_now(
    state: &MonState,
    mons_down: &[String],
    quorum: &[String],
    now_ms: u64,
    ratios: &FullRatios,
) -> Vec<crate::health::CheckNow> {
    raw_checks(state, mons_down, quorum, now_ms, ratios)
        .iter()
        .map(|c| crate::health::CheckNow {
            code: c.code.clone(),
            severity: c.severity.clone(),
            summary: c.summary.clone(),
        })
        .collect()
}

/// The cluster's health checks, as Ceph names them (mutes aside).
fn raw_checks(
    state: &MonState,
    mons_down: &[String],
    quorum: &[String],
    now_ms: u64,
    ratios: &FullRatios,
) -> Vec<HealthCheck> {
    let mut checks = Vec::new();
    // Crashes not yet archived, of the last two weeks (as Ceph warns).
    const RECENT_MS: u64 = 14 * 86_400 * 1000;
    let recent: Vec<String> = state
        .crashes
        .values()
        .filter(|c| !c.archived && now_ms.saturating_sub(c.timestamp_ms) < RECENT_MS)
        .map(|c| {
            format!(
                "{} crashed at {} ({})",
                c.entity_name, c.crash_id, c.message
            )
        })
        .collect();
    if !recent.is_empty() {
        checks.push(HealthCheck::warn(
            "RECENT_CRASH",
            format!("{} daemons have recently crashed", recent.len()),
            recent,
        ));
    }
    if !mons_down.is_empty() {
        checks.push(HealthCheck::warn(
            "MON_DOWN",
            format!(
                "{}/{} mons down, quorum {}",
                mons_down.len(),
                state.mons.len(),
                quorum.join(",")
            ),
            mons_down
                .iter()
                .map(|n| {
                    let addr = state
                        .mons
                        .get(n)
                        .map(|m| m.addr.clone())
                        .unwrap_or_default();
                    format!("mon.{n} at {addr} is out of quorum")
                })
                .collect(),
        ));
    }
    // Once a manager has run, the cluster expects one (as Ceph's MGR_DOWN).
    if state.mgrmap.epoch > 0 && state.mgrmap.active.is_none() {
        checks.push(HealthCheck::warn(
            "MGR_DOWN",
            "no active mgr",
            vec![format!("{} standby mgr(s)", state.mgrmap.standbys.len())],
        ));
    }
    if let Ok(map) = state.osdmap.current() {
        let down: Vec<i32> = map
            .osds()
            .filter(|(id, o)| o.exists && !map.is_up(*id) && o.weight > 0)
            .map(|(id, _)| id)
            .collect();
        if !down.is_empty() {
            checks.push(HealthCheck::warn(
                "OSD_DOWN",
                format!("{} osds down", down.len()),
                down.iter().map(|id| format!("osd.{id} is down")).collect(),
            ));
        }
    }
    if let Ok(map) = state.osdmap.current() {
        checks.extend(crate::views_space::space_health(state, map, ratios));
    }
    checks.extend(crate::autoscale::health(state));
    if !state.osdmap.flags.is_empty() {
        let flags: Vec<&str> = state.osdmap.flags.iter().map(String::as_str).collect();
        checks.push(HealthCheck::warn(
            "OSDMAP_FLAGS",
            format!("{} flag(s) set", flags.join(",")),
            Vec::new(),
        ));
    }
    checks.extend(crate::views_pg::pg_health(state));
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_crush::{BuildSpec, build_map};
    use shoal_maps::Incremental;
    use shoal_monclient::apply_osdmap_update_each;

    fn full(m: &OsdMap) -> Vec<u8> {
        OsdMapUpdate::encode_full(&m.encode())
    }

    #[test]
    fn a_follower_skips_a_full_map_older_than_its_own() {
        let crush = build_map(&BuildSpec::hosts(2, 1, None)).unwrap();
        let mut map = OsdMap::new([1; 16], 0, crush).unwrap();
        let mut older = None;
        for _ in 0..3 {
            let inc = Incremental::next(&map);
            map.apply(&inc).unwrap();
            if map.epoch.0 == 2 {
                older = Some(map.clone());
            }
        }
        let older = older.unwrap();
        let mut local = None;
        let mut seen = Vec::new();
        apply_osdmap_update_each(&mut local, &full(&map), &mut |m| seen.push(m.epoch.0)).unwrap();
        // A queued update from before the subscription's reply: older.
        apply_osdmap_update_each(&mut local, &full(&older), &mut |m| seen.push(m.epoch.0)).unwrap();
        assert_eq!(local.map(|m| m.epoch.0), Some(3));
        assert_eq!(seen, vec![3]);
    }
}
