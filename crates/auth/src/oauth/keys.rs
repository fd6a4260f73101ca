//! The authorization server's signing keys (its JWKS), fetched lazily and kept.
//!
//! Guarantees, each kept here:
//! - **Off the request path, single-flight.** Only the fetcher thread (started at the
//!   first need) talks to the provider, one fetch at a time. A request that needs keys
//!   asks for a fetch and waits for it at most `wait_bound`; it never fetches itself.
//! - **Unknown `kid`s cannot flood the provider.** A `kid` that is not in the set asks
//!   for a refetch only when the last fetch started at least `cooldown` ago; otherwise
//!   the token is refused at once, without a round trip. (Before the first successful
//!   fetch the gap is [`RETRY_WITHOUT_KEYS`], so that a provider that was down at
//!   start-up is tried again soon.)
//! - **Cached as the headers allow.** A set is fresh for its `Cache-Control: max-age`
//!   (clamped to [`MIN_FRESH`]..[`MAX_FRESH`]; [`DEFAULT_FRESH`] without one). A stale
//!   set still verifies tokens while a refresh runs in the background.
//! - **The last good keys stay.** A failed fetch (provider down, slow, or answering
//!   garbage) changes nothing: tokens signed with known keys keep verifying.
//! - **Signature keys only.** Symmetric (`oct`) keys and keys marked for encryption are
//!   dropped, so no HMAC verification can ever happen; a key that names its `alg` is
//!   used for that algorithm only.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::discovery::discover;
use super::http::{get_json, FetchError};

/// Algorithms accepted; every other one is refused before a key is looked up.
pub const ALLOWED: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// Gap between fetches while no key set was ever loaded.
pub const RETRY_WITHOUT_KEYS: Duration = Duration::from_secs(1);
/// Shortest and longest time a fetched set counts as fresh.
pub const MIN_FRESH: Duration = Duration::from_secs(60);
pub const MAX_FRESH: Duration = Duration::from_secs(24 * 3600);
/// Freshness of a set served without `Cache-Control: max-age`.
pub const DEFAULT_FRESH: Duration = Duration::from_secs(600);

/// One verification key.
pub struct Key {
    pub decoding: DecodingKey,
    /// The algorithm the key is restricted to (its JWK `alg`), if any.
    pub alg: Option<Algorithm>,
}

impl Key {
    /// Whether a token signed with `alg` may be checked with this key.
    fn fits(&self, alg: Algorithm) -> bool {
        match self.alg {
            Some(own) => own == alg,
            None => self.decoding.family() == alg.family(),
        }
    }
}

/// A loaded key set.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    without_kid: Vec<Arc<Key>>,
    /// SHA-256 of the fetched document: a refetch of the same keys changes nothing.
    digest: [u8; 32],
}

/// What a lookup found.
pub enum Lookup {
    /// The keys that may have signed the token (with a `kid`: one).
    Found(Vec<Arc<Key>>),
    /// The set was loaded and has no such key: the token is invalid here.
    Unknown,
    /// No key set could be loaded in time: the token cannot be checked now.
    Unavailable,
}

/// Where the key set is.
pub enum Source {
    /// `jwks_uri` from the configuration.
    Uri(String),
    /// Discovered from the issuer's metadata (RFC 8414 / OIDC) at the first fetch.
    Issuer(String),
}

/// The keys, and the fetcher thread that keeps them.
pub struct KeyStore {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a fetch ends (lookups wait on it).
    fetched: Condvar,
    /// Signalled when a fetch is asked for, or the store is dropped (the fetcher waits
    /// on it).
    wake: Condvar,
    source: Source,
    agent: ureq::Agent,
    cooldown: Duration,
    wait_bound: Duration,
}

struct State {
    keys: Arc<KeySet>,
    /// Bumped whenever the set's contents change (verified tokens of an older epoch
    /// are checked again).
    epoch: u64,
    loaded: bool,
    fresh_until: Option<Instant>,
    last_attempt: Option<Instant>,
    requested: bool,
    fetching: bool,
    /// Fetches finished, successful or not.
    finished: u64,
    fetcher_started: bool,
    closed: bool,
    /// The key set's URL, once known.
    jwks_uri: Option<String>,
}

impl KeyStore {
    pub fn new(
        source: Source,
        agent: ureq::Agent,
        cooldown: Duration,
        wait_bound: Duration,
    ) -> KeyStore {
        let jwks_uri = match &source {
            Source::Uri(uri) => Some(uri.clone()),
            Source::Issuer(_) => None,
        };
        KeyStore {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    keys: Arc::default(),
                    epoch: 0,
                    loaded: false,
                    fresh_until: None,
                    last_attempt: None,
                    requested: false,
                    fetching: false,
                    finished: 0,
                    fetcher_started: false,
                    closed: false,
                    jwks_uri,
                }),
                fetched: Condvar::new(),
                wake: Condvar::new(),
                source,
                agent,
                cooldown,
                wait_bound,
            }),
        }
    }

    /// The epoch of the current set: verified tokens remembered under another epoch
    /// are verified again.
    pub fn epoch(&self) -> u64 {
        self.shared.lock().epoch
    }

    /// The keys that may check a token signed with `alg` (by `kid`, when it names one),
    /// waiting at most `wait_bound` for a fetch this lookup needs.
    pub fn find(&self, kid: Option<&str>, alg: Algorithm) -> Lookup {
        let shared = &*self.shared;
        let deadline = Instant::now() + shared.wait_bound;
        let mut state = shared.lock();
        let mut waiting_since: Option<u64> = None;
        loop {
            let found = state.keys.find(kid, alg);
            if !found.is_empty() {
                let stale = state.fresh_until.is_none_or(|t| Instant::now() >= t);
                if stale && shared.may_fetch(&state) {
                    // Keeps verifying with the stale set meanwhile.
                    ask(&self.shared, &mut state);
                }
                return Lookup::Found(found);
            }
            let miss = if state.loaded {
                Lookup::Unknown
            } else {
                Lookup::Unavailable
            };
            if waiting_since.is_some_and(|finished| state.finished > finished) {
                // The fetch this lookup waited for is done, and did not bring the key.
                return miss;
            }
            if !state.requested && !state.fetching {
                if !shared.may_fetch(&state) {
                    return miss;
                }
                ask(&self.shared, &mut state);
            }
            waiting_since.get_or_insert(state.finished);
            let now = Instant::now();
            if now >= deadline {
                return miss;
            }
            state = shared
                .fetched
                .wait_timeout(state, deadline - now)
                .map_or_else(|poisoned| poisoned.into_inner().0, |(guard, _)| guard);
        }
    }
}

impl Drop for KeyStore {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a fetch may start now: the cooldown (or, with no keys yet, the short
    /// retry gap) has passed since the last one started.
    fn may_fetch(&self, state: &State) -> bool {
        let gap = if state.loaded {
            self.cooldown
        } else {
            RETRY_WITHOUT_KEYS
        };
        state.last_attempt.is_none_or(|t| t.elapsed() >= gap)
    }
}

/// Asks the fetcher for a fetch, starting its thread at the first need. The thread
/// holds the shared state until the store is dropped (`closed`).
fn ask(shared: &Arc<Shared>, state: &mut State) {
    state.requested = true;
    shared.wake.notify_all();
    if state.fetcher_started {
        return;
    }
    let worker = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("oauth-keys".into())
        .spawn(move || fetch_loop(&worker));
    match spawned {
        Ok(_) => state.fetcher_started = true,
        Err(_) => log::error!("oauth: could not start the key fetcher thread"),
    }
}

impl KeySet {
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Arc<Key>> {
        match kid {
            Some(kid) => self
                .by_kid
                .get(kid)
                .filter(|key| key.fits(alg))
                .map(Arc::clone)
                .into_iter()
                .collect(),
            // A provider with one key may leave `kid` out; every fitting key is tried.
            None => self
                .by_kid
                .values()
                .chain(&self.without_kid)
                .filter(|key| key.fits(alg))
                .map(Arc::clone)
                .collect(),
        }
    }

    /// The signature keys of a JWKS document; keys that cannot be used are skipped
    /// (one odd key must not take the others down).
    fn parse(document: &Value) -> KeySet {
        let mut set = KeySet {
            digest: Sha256::digest(document.to_string().as_bytes()).into(),
            ..KeySet::default()
        };
        let keys = document["keys"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for value in keys {
            if value
                .get("use")
                .and_then(Value::as_str)
                .is_some_and(|u| u != "sig")
            {
                continue;
            }
            let Ok(jwk) = serde_json::from_value::<Jwk>(value.clone()) else {
                continue;
            };
            if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
                continue; // never an HMAC secret
            }
            // A key that names an algorithm outside the allowed ones is never used.
            let alg = match value.get("alg").and_then(Value::as_str) {
                Some(named) => match named.parse::<Algorithm>() {
                    Ok(alg) if ALLOWED.contains(&alg) => Some(alg),
                    _ => continue,
                },
                None => None,
            };
            let Ok(decoding) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            let key = Arc::new(Key { decoding, alg });
            match jwk.common.key_id {
                Some(kid) => {
                    set.by_kid.insert(kid, key);
                }
                None => set.without_kid.push(key),
            }
        }
        set
    }
}

/// The fetcher: one fetch at a time, whenever one is asked for, until the store is
/// dropped.
fn fetch_loop(shared: &Shared) {
    loop {
        let mut state = shared.lock();
        while !state.requested && !state.closed {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.closed {
            return;
        }
        state.requested = false;
        state.fetching = true;
        state.last_attempt = Some(Instant::now());
        let known_uri = state.jwks_uri.clone();
        drop(state);

        let result = fetch(shared, known_uri);

        let mut state = shared.lock();
        state.fetching = false;
        state.finished += 1;
        match result {
            Ok((uri, set, max_age)) => {
                let fresh = max_age.unwrap_or(DEFAULT_FRESH).clamp(MIN_FRESH, MAX_FRESH);
                state.fresh_until = Some(Instant::now() + fresh);
                state.jwks_uri = Some(uri);
                if set.digest != state.keys.digest {
                    log::info!(
                        "oauth: loaded {} signing keys",
                        set.by_kid.len() + set.without_kid.len()
                    );
                    state.keys = Arc::new(set);
                    state.epoch += 1;
                }
                state.loaded = true;
            }
            Err(error) => {
                log::warn!("oauth: key set not refreshed (the last good keys stay): {error}")
            }
        }
        drop(state);
        shared.fetched.notify_all();
    }
}

/// One fetch: discovery first when the key set's URL is not known yet.
fn fetch(
    shared: &Shared,
    known_uri: Option<String>,
) -> Result<(String, KeySet, Option<Duration>), FetchError> {
    let uri =
        match (known_uri, &shared.source) {
            (Some(uri), _) => uri,
            (None, Source::Uri(uri)) => uri.clone(),
            (None, Source::Issuer(issuer)) => discover(&shared.agent, issuer)?
                .jwks_uri
                .ok_or_else(|| FetchError::NotJson {
                    url: format!("{issuer} (its metadata names no jwks_uri)"),
                })?,
        };
    let fetched = get_json(&shared.agent, &uri)?;
    let set = KeySet::parse(&fetched.body);
    Ok((uri, set, fetched.max_age))
}
