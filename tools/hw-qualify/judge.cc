// SPDX-License-Identifier: BSD-3-Clause
// From the experiment's counts to its conclusions and the device profile they support.
#include <string>

#include "hw-qualify.h"

namespace rnicdv::hwq {

namespace {

std::string n_of(uint32_t n, uint32_t of) {
  return std::to_string(n) + " of " + std::to_string(of);
}

}  // namespace

ExperimentVerdict judge(const ExperimentFindings& f) {
  ExperimentVerdict v;
  const PartFindings& a = f.a;
  const PartFindings& b = f.b;
  const PartFindings& c = f.c;
  const std::string window = " within " + std::to_string(f.window_ms) + " ms";

  // The controls: after the last doorbell every WQE of the part ran, with no error CQE.
  const bool a_ok = a.written > 0 && a.in_rtr + a.after_rts + a.after_doorbell == a.written &&
                    a.cqes == a.written && a.error_cqes == 0;
  const bool b_ok = b.written > 1 && b.announced == 1 &&
                    1 + b.beyond + b.after_doorbell == b.written && b.cqes == b.written &&
                    b.error_cqes == 0;
  const bool c_ok = c.written == 1 && c.in_rtr + c.after_rts + c.after_doorbell == 1 &&
                    c.cqes == 1 && c.error_cqes == 0;
  v.conclusive = a_ok && b_ok && c_ok;

  if (a.in_rtr > 0) {
    v.a = n_of(a.in_rtr, a.written) + " ran while the QP was in RTR, with no doorbell";
  } else if (a.after_rts > 0) {
    v.a = "none ran in RTR; " + n_of(a.after_rts, a.written) +
          " ran after the move to RTS, with no doorbell";
  } else {
    v.a = "none ran without a doorbell (in RTR, nor" + window + " after the move to RTS); " +
          n_of(a.after_doorbell, a.written) + " ran once rung";
  }
  if (!a_ok) v.a += " [control failed: " + std::to_string(a.cqes) + " CQEs, " +
                    std::to_string(a.error_cqes) + " errors]";

  if (b.beyond > 0) {
    v.b = "the device fetched and ran " + n_of(b.beyond, b.written - 1) +
          " WQEs beyond the doorbell record";
  } else {
    v.b = "the device stopped at the doorbell record: it ran " + n_of(b.announced, 1) +
          " announced WQE and none of the " + std::to_string(b.written - 1) + " beyond it" +
          window + "; " + n_of(b.after_doorbell, b.written - 1) + " ran once rung";
  }
  if (!b_ok) v.b += " [control failed: " + std::to_string(b.cqes) + " CQEs, " +
                    std::to_string(b.error_cqes) + " errors]";

  const bool runs_unannounced = a.in_rtr > 0 || a.after_rts > 0;
  v.keeps_rtr_doorbell_determined = !runs_unannounced;
  if (c.in_rtr > 0) {
    v.c = "the WQE ran while the QP was still in RTR";
  } else if (runs_unannounced) {
    v.c = "cannot tell: the WQE ran after the move to RTS, but so do WQEs no doorbell "
          "announced (a)";
  } else if (c.after_rts > 0) {
    v.c = "kept: the WQE ran after the move to RTS with no further doorbell";
  } else {
    v.c = "forgotten: the WQE did not run after the move to RTS" + window +
          " until the doorbell was rung again";
  }
  if (!c_ok) v.c += " [control failed: " + std::to_string(c.cqes) + " CQEs, " +
                    std::to_string(c.error_cqes) + " errors]";

  // A device that runs a WQE no doorbell announced, in RTR or after it, may run work that is
  // withheld in place: that is what fetches_beyond_dbr names.
  v.fetches_beyond_dbr = b.beyond > 0 || a.in_rtr > 0 || a.after_rts > 0;
  v.keeps_rtr_doorbell = runs_unannounced || c.in_rtr > 0 || c.after_rts > 0;
  v.profile.fetches_beyond_dbr = v.fetches_beyond_dbr;
  v.profile.keeps_rtr_doorbell = v.keeps_rtr_doorbell;
  v.withholding = v.fetches_beyond_dbr ? "shadow" : "in_place";
  return v;
}

}  // namespace rnicdv::hwq
