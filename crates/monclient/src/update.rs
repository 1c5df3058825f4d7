//! Applying the monitors' `osdmap` subscription payloads (a full map, or
//! the incrementals since the subscriber's epoch) to a subscriber's map.

use serde_json::Value;
use shoal_maps::OsdMap;
use shoal_net::Secret;

use crate::error::{ErrorCode, MonError};

/// Applies an `osdmap` subscription payload to `map` (None: no map yet).
pub fn apply_osdmap_update(map: &mut Option<OsdMap>, update: &Value) -> Result<(), MonError> {
    apply_osdmap_update_each(map, update, &mut |_| {})
}

/// [`apply_osdmap_update`], calling `each` with every map it produces, in
/// epoch order (one per incremental applied, or the full map).
pub fn apply_osdmap_update_each(
    map: &mut Option<OsdMap>,
    update: &Value,
    each: &mut dyn FnMut(&OsdMap),
) -> Result<(), MonError> {
    let bad = |e: String| MonError::new(ErrorCode::Internal, format!("bad osdmap update: {e}"));
    if let Some(full) = update["full"].as_str() {
        let bytes = Secret::decode_base64(full).map_err(bad)?;
        let full = OsdMap::decode(&bytes).map_err(|e| bad(e.to_string()))?;
        // A follower never goes back to an older map.
        if map.as_ref().is_some_and(|m| m.epoch.0 >= full.epoch.0) {
            return Ok(());
        }
        each(&full);
        *map = Some(full);
        return Ok(());
    }
    let Some(current) = map.as_mut() else {
        return Err(bad("incrementals without a base map".into()));
    };
    for inc in update["incrementals"].as_array().into_iter().flatten() {
        let bytes = Secret::decode_base64(inc.as_str().unwrap_or("")).map_err(bad)?;
        let inc = shoal_maps::Incremental::decode(&bytes).map_err(|e| bad(e.to_string()))?;
        if inc.epoch.0 <= current.epoch.0 {
            continue;
        }
        // A gap is an error: the caller subscribes again from its epoch.
        current.apply(&inc).map_err(|e| bad(e.to_string()))?;
        each(current);
    }
    Ok(())
}
