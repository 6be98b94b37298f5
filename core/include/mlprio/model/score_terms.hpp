// The parts of the priority score (score.cpp) that a job's wait and its user's usage do not move,
// in a header of their own so that the replayer's JobView can carry them without the predictor
// interface (see model::score_terms in predictor.hpp).
#pragma once

namespace mlprio::model {

struct ScoreTerms {
  double run = 0;   // score_run_term(): log2(1 + r/60) of the prediction, request or an hour
  double size = 0;  // b log2(procs), added where `sized` (b != 0 and procs > 1)
  double fail = 0;  // 8 g p_fail
  // The squashed score below the starvation limit, where it does not move with the wait or the
  // usage: no age term (a = 0) and no fair-share term (f = 0).
  double unmoved = 0;
  bool sized = false;
  bool fixed = false;  // unmoved holds that score
};

}  // namespace mlprio::model
