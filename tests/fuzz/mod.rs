//! Generated-input ("fuzz") tests through the real binary, on stable Rust with
//! `proptest` (cargo-fuzz needs nightly). The parsers' own generated-input tests sit
//! beside them in `src/` (`fuzz` test modules); here the whole HTTP request path is
//! driven over a socket.
//!
//! Inside `cargo test` a run uses a fixed seed and a few hundred cases, so CI sends the
//! same bytes every time. `PROPTEST_CASES` and `PROPTEST_RNG_SEED` override both:
//! `benches/fuzz.sh` runs long with a fresh seed and prints it, to replay a failure.

mod http;

use proptest::test_runner::{Config, RngSeed};

/// Seed of the bounded run (the same as the in-process runs').
const SEED: u64 = 0x6d63_702d_7461_736b;

/// `cases` generated inputs from [`SEED`], unless the environment says otherwise.
fn config(cases: u32) -> Config {
    let from_env = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            from_env.cases
        } else {
            cases
        },
        rng_seed: match from_env.rng_seed {
            RngSeed::Random => RngSeed::Fixed(SEED),
            fixed => fixed,
        },
        failure_persistence: None,
        ..from_env
    }
}
