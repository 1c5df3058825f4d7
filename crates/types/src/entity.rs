//! Entity names: who is talking. Every daemon and client has one, written as
//! `TYPE.ID` exactly as Ceph writes them (`mon.a`, `osd.3`, `client.admin`).

use std::fmt;
use std::str::FromStr;

/// The kind of an entity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityType {
    /// A monitor (`mon.a`).
    Mon,
    /// An object storage daemon (`osd.3`).
    Osd,
    /// A client: tools, gateways, mounts (`client.admin`).
    Client,
    /// A manager (`mgr.x`).
    Mgr,
    /// A metadata server (`mds.a`).
    Mds,
}

impl EntityType {
    /// The lowercase name used in entity names and config sections.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityType::Mon => "mon",
            EntityType::Osd => "osd",
            EntityType::Client => "client",
            EntityType::Mgr => "mgr",
            EntityType::Mds => "mds",
        }
    }

    /// Every entity type, in a fixed order.
    pub const ALL: [EntityType; 5] = [
        EntityType::Mon,
        EntityType::Osd,
        EntityType::Client,
        EntityType::Mgr,
        EntityType::Mds,
    ];
}

impl FromStr for EntityType {
    type Err = ParseEntityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EntityType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| ParseEntityError::UnknownType(s.to_string()))
    }
}

impl fmt::Display for EntityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `TYPE.ID`, for example `osd.3`. The id is a non-empty string of at most
/// [`EntityName::ID_MAX_LEN`] ASCII letters, digits, `_` or `-`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityName {
    ty: EntityType,
    id: String,
}

/// Why a string is not an entity name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseEntityError {
    /// The part before the dot is not a known entity type.
    #[error("unknown entity type {0:?} (expected mon, osd, client, mgr or mds)")]
    UnknownType(String),
    /// There is no `.` separating type and id.
    #[error("entity name {0:?} is not of the form TYPE.ID (e.g. osd.3, client.admin)")]
    MissingDot(String),
    /// The id part is empty, too long or has characters outside `[A-Za-z0-9_-]`.
    #[error("entity id {0:?} must be 1-64 characters of letters, digits, '_' or '-'")]
    BadId(String),
}

impl EntityName {
    /// The longest id accepted.
    pub const ID_MAX_LEN: usize = 64;

    /// Builds a name after checking the id.
    pub fn new(ty: EntityType, id: impl Into<String>) -> Result<Self, ParseEntityError> {
        let id = id.into();
        let ok = !id.is_empty()
            && id.len() <= Self::ID_MAX_LEN
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(ParseEntityError::BadId(id));
        }
        Ok(EntityName { ty, id })
    }

    /// `osd.N`.
    pub fn osd(n: u32) -> Self {
        EntityName {
            ty: EntityType::Osd,
            id: n.to_string(),
        }
    }

    /// The entity type.
    pub fn ty(&self) -> EntityType {
        self.ty
    }

    /// The id part (after the dot).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl FromStr for EntityName {
    type Err = ParseEntityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ty, id) = s
            .split_once('.')
            .ok_or_else(|| ParseEntityError::MissingDot(s.to_string()))?;
        EntityName::new(ty.parse()?, id)
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.ty, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for s in ["mon.a", "osd.3", "client.admin", "mgr.x", "mds.fs-1"] {
            let n: EntityName = s.parse().unwrap();
            assert_eq!(n.to_string(), s);
        }
        assert_eq!(EntityName::osd(3), "osd.3".parse().unwrap());
    }

    #[test]
    fn rejects_bad_names() {
        assert!(matches!(
            "osd".parse::<EntityName>(),
            Err(ParseEntityError::MissingDot(_))
        ));
        assert!(matches!(
            "disk.3".parse::<EntityName>(),
            Err(ParseEntityError::UnknownType(_))
        ));
        assert!(matches!(
            "osd.".parse::<EntityName>(),
            Err(ParseEntityError::BadId(_))
        ));
        assert!(matches!(
            "client.a b".parse::<EntityName>(),
            Err(ParseEntityError::BadId(_))
        ));
        let long = format!("client.{}", "x".repeat(65));
        assert!(long.parse::<EntityName>().is_err());
    }
}
