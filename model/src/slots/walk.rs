//! Seeded random paths through the model, for conformance replays.

use super::actions::SlotAction;
use super::config::SlotConfig;
use super::state::SlotState;
use super::SlotModel;
use stateright::Model;

/// A small deterministic generator for [`random_walk`] (no global randomness in the model).
pub(super) struct SplitMix64(u64);

impl SplitMix64 {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A seeded random path through the model: the actions taken and the state after each, at most
/// `max_steps` long, ending early in a state where nothing can act. A conformance replay drives
/// the real shell with the same actions and compares each published `queue.json` with the
/// state's `queue`.
pub fn random_walk(cfg: SlotConfig, seed: u64, max_steps: usize) -> Vec<(SlotAction, SlotState)> {
    let model = SlotModel::new(cfg);
    let mut rng = SplitMix64(seed);
    let mut state = model.initial_state();
    let mut path = Vec::new();
    let mut actions = Vec::new();
    for _ in 0..max_steps {
        actions.clear();
        model.actions(&state, &mut actions);
        if actions.is_empty() {
            break;
        }
        let pick = (rng.next() % actions.len() as u64) as usize;
        let action = actions.swap_remove(pick);
        state = model.apply(&state, &action);
        path.push((action, state.clone()));
    }
    path
}

/// The initial state of `cfg`'s model (the state a replay starts from).
pub fn initial_state(cfg: &SlotConfig) -> SlotState {
    SlotModel::new(cfg.clone()).initial_state()
}
