//! What the crash-storm tests (tests/containment_storm.rs, tests/fleet_accept.rs) share: a small
//! seeded generator, so a seed names one storm, and their knobs from the environment.

/// xorshift64*: a small seeded generator, so a seed names one storm.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The environment variable `name` as a number, or `default` when it is unset or not a number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
