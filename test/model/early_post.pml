/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The early-post gate of one RC QP, as drv/ implements it, with the device and the CQ poller
 * around it: posting threads, an event thread that moves the QP to RTS or to ERR, the HCA
 * executing what the doorbell record announces, and the send CQ's poller retiring WQEs and
 * delivering the driver's own flush errors. Spin checks design.md's invariants 1-5 as
 * assertions (every state) and as LTL properties (ltl blocks below).
 *
 * Which code each part stands for:
 *   Poster          QueuePair::post_send -> QpCore::post_send (detail/qp_inl.h): the state
 *                   check, the post lock, post_ready; QpCore::post_send_slow, post_gated,
 *                   post_withheld and post_flushed (drv/src/qp_post.cc). The typed calls
 *                   (detail/qp_typed_inl.h) take the same steps. The driver's posters read
 *                   the post gate (QpCore::gate), which publish_state stores right after the
 *                   state under the post lock, as a function of it: the model's read of
 *                   `state` stands for that read.
 *   Events          QpCore::modify (drv/src/qp_control.cc): hw_qp->modify first, then under
 *                   the post lock release_withheld_locked (RTR->RTS, the flush) or
 *                   enter_error_locked (->ERR, the failure flush).
 *   Owner           Threading::single: one thread posts and delivers the events.
 *   Device          the HCA (hw/sim/src/engine.cc, rc/sq_fetch.cc, rc/flush.cc): in RTS it
 *                   executes WQEs up to the SQ doorbell record, in ERR it flushes them; a
 *                   scanning device (fetches_beyond_dbr) also takes valid-looking WQEs past it.
 *   Poller          CqCore::poll (detail/cq_inl.h) -> QpCore::retire_send, and
 *                   CqCore::poll_software (drv/src/cq.cc) -> QpCore::poll_software.
 *   Checker         the end of the run: every accepted WR completed exactly once.
 *
 * Configuration (spin -D...):
 *   THREADING       0 single, 1 single_poster (default), 2 thread_safe (Threading in
 *                   qp_config.h). thread_safe runs two posting threads; single_poster one
 *                   (its contract), both beside one event thread.
 *   SHADOW          1: EarlyPost::shadow (WQEs built in a driver ring, copied at the flush);
 *                   0: EarlyPost::in_place.
 *   SCANNING        1: the device fetches valid-looking WQEs beyond the doorbell record.
 *                   The driver then publishes each WQE's sq_entries slot and ring_pi before
 *                   the WQE itself (post_ready_scanning, the drain NOP, the shadow copy);
 *                   written in the other order, the device could complete a WQE first and
 *                   the poller would drop its CQE as stale (SCANNING_BROKEN_ORDER).
 *   BROKEN_FLUSH_ORDER  the flush publishes RTS before it rings the doorbell: a known-bad
 *                   variant that the checks must reject (test/model/run_spin.sh broken).
 *   SCANNING_BROKEN_ORDER  with SCANNING, post_ready writes the WQE before its entry and
 *                   ring_pi, as the plain fast path does: also known-bad, also rejected.
 *   CTRL_HEAD_FIRST with SCANNING, a WQE's ctrl segment is stored head first: the 8 bytes a
 *                   scanning device tests for a valid WQE (opcode, index, QPN, DS) before the
 *                   8 that say whether it wants a CQE (fm_ce_se). The device can then run a
 *                   valid-looking WQE as unsignaled, and its completion is never written:
 *                   known-bad, rejected. The driver stores the head last, with release
 *                   ordering (wqe::publish_ctrl_segment), and the device reads it first.
 *
 * With SCANNING and SHADOW=0 (in-place withholding on a scanning device), the device runs
 * withheld WQEs the moment its QP reaches RTS, before the driver has announced them: a
 * configuration the checks must reject, and which Device::create_qp refuses.
 *
 * Steps: each Promela statement is one atomic step, so reads and writes of shared variables
 * interleave as the real threads' loads and stores can. The poller's work on one CQE, and on
 * one batch of software completions, is a single step: everything it reads there is stable
 * while it runs (see the comments in Poller). Locals are zeroed when dead, so that states
 * that differ only in them are not told apart.
 *
 * Scale: a send queue of 2 basic blocks, WQEs of one block each, and 3 or 4 WRs, so that
 * the queue fills in RTR (invariant 5), wraps in RTS, and every state is explored.
 * Counters are free-running bytes, as the driver's are free-running 32-bit values.
 */

#ifndef THREADING
#define THREADING 1
#endif
#ifndef SHADOW
#define SHADOW 0
#endif
#ifndef SCANNING
#define SCANNING 0
#endif

#define T_SINGLE 0
#define T_SINGLE_POSTER 1
#define T_THREAD_SAFE 2

#define DEPTH 2 /* SQ basic blocks (sq.bb_count), a power of two */
#define MASK (DEPTH - 1)
#define D(a, b) (((a) - (b)) & 255) /* free-running counter distance */

#if THREADING == T_THREAD_SAFE
#define NPOSTERS 2
#define NPOST 2
#else
#define NPOSTERS 1
#define NPOST 3
#endif
#define NOP_ID 7 /* the drain marker's WQE (kDrainMarker); user WR ids are 1..6 */
#define MAXID 8

/* hw::QpState values used here, ordered as the enum. */
#define RTR 2
#define RTS 3
#define ERR 6

/* Errc results of a post. */
#define OK 0
#define QUEUE_FULL 1
#define BAD_STATE 2

/* ---- Driver state (QpCore, detail/qp_core.h) ---------------------------------------------- */
byte state = RTR;       /* QpCore::state: the driver's view, published with release */
byte sq_pi;             /* next free block */
byte hw_pi;             /* last value stored into the SQ doorbell record */
byte ring_pi;           /* end of the WQEs the device may run */
byte unrung;            /* WRs built since the last doorbell */
byte withheld;          /* WRs posted in RTR, not yet released */
byte last_wqe_pi;
bool ever_rts;
bool software_flush;
byte sw_begin, sw_end;  /* driver-made flush completions: [sw_begin, sw_end) */
byte sq_tail;           /* first block not yet retired (written by the poller) */
bit post_lock;          /* QpCore::post_lock */
byte entry_id[DEPTH];   /* sq_entries[]: wr_id */
bit entry_drain[DEPTH]; /* sq_entries[]: kind == kDrainMarker */

/* The send CQ's list of QPs with software completions (CqCore::software_*). */
bit sw_lock;
bool sw_listed;
bool sw_pending;

/* ---- Memory the device reads ---------------------------------------------------------------- */
/* A WQE's ctrl segment in two parts, as a device sees them: the head (opmod_idx_opcode and
 * qpn_ds: sq_id, sq_idx) and the rest (fm_ce_se: sq_sig, whether a CQE is wanted). Every WR
 * here is signaled, and so is the drain NOP. */
byte sq_id[DEPTH];  /* the WQE in each SQ slot (0: zeroed memory) */
byte sq_idx[DEPTH]; /* its ctrl segment's WQE index (opmod_idx_opcode) */
bit sq_sig[DEPTH];  /* its fm_ce_se CQ_UPDATE bit */
byte sh_id[DEPTH];  /* the shadow ring (EarlyPost::shadow): the WQE each slot holds */
byte dbr;           /* dbrec[MLX5_SND_DBR] */
byte uar_writes;    /* doorbell register writes */

/* ---- Device ----------------------------------------------------------------------------------- */
byte dev_state = RTR; /* the device's QP state */
byte dev_ci;          /* next WQE the device fetches */
chan cq = [8] of { byte, bit }; /* CQEs: wqe_counter, error (flush) */

/* ---- Ghost variables for the invariants --------------------------------------------------- */
bool dev_rts_reached;  /* the device QP has been in RTS */
byte accepted[MAXID];  /* post returned ok */
byte executed[MAXID];  /* the device ran it */
byte completed[MAXID]; /* completions the application polled */
bool was_withheld[MAXID];
byte executed_total;
bool ran_posted_after_rts; /* a WR posted in RTS has executed */
bool order_broken;         /* invariant 4 violated */
bool bad_state_seen;       /* a post got bad_state */
byte posters_done;
bool events_done;

#define ACC(i) (accepted[i] == completed[i])
#define all_accounted (posters_done == NPOSTERS && events_done && ACC(1) && ACC(2) && ACC(3) && \
                       ACC(4) && ACC(5) && ACC(6))

/* Invariant 1: no send doorbell (record or register) before the QP has reached RTS. */
ltl inv1_no_doorbell_below_rts { [] ((dbr != 0 || uar_writes != 0) -> dev_rts_reached) }
/* Invariant 2: no WQE executes before RTS. */
ltl inv2_nothing_runs_before_rts { [] ((executed_total > 0) -> dev_rts_reached) }
/* Invariant 3: every accepted WR ends with exactly one completion (and stays so). */
ltl inv3_exactly_once { <> [] all_accounted }
/* Invariant 4: withheld WRs execute before anything posted after RTS. */
ltl inv4_sq_order { [] !order_broken }
/* Invariant 5: the withheld batch and the SQ never exceed the depth; never a state error. */
ltl inv5_bounded_batch { [] (withheld <= DEPTH && D(sq_pi, sq_tail) <= DEPTH && !bad_state_seen) }

inline spin_lock(l) {
  atomic { l == 0 -> l = 1 }
}
inline spin_unlock(l) {
  l = 0
}

#if THREADING == T_SINGLE
#define LOCK_POSTS() skip
#define UNLOCK_POSTS() skip
#else
#define LOCK_POSTS() spin_lock(post_lock)
#define UNLOCK_POSTS() spin_unlock(post_lock)
#endif

/* wqe::publish_ctrl_segment: the WQE's ctrl segment into SQ slot `pi`, fm_ce_se first and
 * the head last (CTRL_HEAD_FIRST: the other way round). Two steps only where the order can be
 * seen: on a device that runs valid-looking WQEs past the doorbell record. */
#if SCANNING && defined(CTRL_HEAD_FIRST)
#define PUBLISH_CTRL(pi, id) sq_idx[(pi) & MASK] = (pi); sq_id[(pi) & MASK] = (id); \
                             sq_sig[(pi) & MASK] = 1
#elif SCANNING
#define PUBLISH_CTRL(pi, id) sq_sig[(pi) & MASK] = 1; \
                             atomic { sq_idx[(pi) & MASK] = (pi); sq_id[(pi) & MASK] = (id) }
#else
#define PUBLISH_CTRL(pi, id) atomic { sq_sig[(pi) & MASK] = 1; sq_idx[(pi) & MASK] = (pi); \
                                      sq_id[(pi) & MASK] = (id) }
#endif

/* QpCore::ring_unrung (qp_inl.h) and SendDoorbell::ring (send_doorbell_inl.h). */
inline ring_unrung() {
  hw_pi = sq_pi;
  ring_pi = sq_pi;
  /* to_device_barrier, then store_dbr(pi): the WQEs are in memory first. */
  atomic { assert(dev_state != RTR); /* invariant 1 */ dbr = sq_pi };
  uar_writes++; /* mmio_write64 of the last WQE's ctrl */
  unrung = 0
}

/* CqCore::add_software_qp (cq.cc). */
inline add_software_qp() {
  spin_lock(sw_lock);
  sw_listed = 1;
  sw_pending = 1;
  spin_unlock(sw_lock)
}

/* QpCore::post_ready (qp_inl.h), one WR, ring = true. */
inline post_ready(id, err) {
  pi = sq_pi;
  tail = sq_tail;
  if
  :: D(pi, tail) >= DEPTH -> tail = sq_tail /* queue_full: read the tail once more */
  :: else -> skip
  fi;
  if
  :: D(pi, tail) < DEPTH ->
#if SCANNING && !defined(SCANNING_BROKEN_ORDER)
    /* post_ready_scanning (qp_post.cc): the entry and ring_pi, then a release fence, then
     * the WQE, so that the device cannot complete a WQE the poller does not know. */
    entry_id[pi & MASK] = id;
    entry_drain[pi & MASK] = 0;
    sq_pi = pi + 1;
    ring_pi = pi + 1;
    PUBLISH_CTRL(pi, id);  /* encode_send_wqe: the segments, then the ctrl segment last */
#else
    PUBLISH_CTRL(pi, id); /* encode_send_wqe into the SQ */
    entry_id[pi & MASK] = id;
    entry_drain[pi & MASK] = 0;
#endif
    last_wqe_pi = pi;
    pi = pi + 1;
    err = OK
  :: else -> err = QUEUE_FULL
  fi;
  sq_pi = pi;
  if
  :: err == OK -> tmp = unrung; unrung = tmp + 1
  :: else -> skip
  fi;
  if
  :: unrung != 0 -> ring_unrung()
  :: else -> ring_pi = pi
  fi
}

/* QpCore::post_withheld (qp_post.cc): RTR, no doorbell of any kind. */
inline post_withheld(id, err) {
  pi = sq_pi;
  tail = sq_tail;
  if
  :: D(pi, tail) < DEPTH ->
#if SHADOW
    sh_id[pi & MASK] = id;
#else
    PUBLISH_CTRL(pi, id);
#endif
    entry_id[pi & MASK] = id;
    entry_drain[pi & MASK] = 0;
    last_wqe_pi = pi;
    pi = pi + 1;
    was_withheld[id] = 1;
    err = OK
  :: else -> err = QUEUE_FULL
  fi;
  sq_pi = pi;
  if
  :: err == OK -> tmp = unrung; unrung = tmp + 1; tmp = withheld; withheld = tmp + 1
  :: else -> skip
  fi;
  assert(withheld <= DEPTH) /* invariant 5 */
}

/* QpCore::post_flushed (qp_post.cc): ERR, completed by the driver after the device's. */
inline post_flushed(id, err) {
  err = OK;
  if
  :: !software_flush ->
    tail = sq_tail;
    if
    :: sq_pi != tail ->
      /* Hand the device everything built so far and a signaled NOP (the drain marker). */
      if
      :: D(sq_pi, tail) < DEPTH ->
        /* The marker's entry first; a scanning device also needs ring_pi past it before the
         * NOP is written (in ERR it flushes valid-looking WQEs). */
        entry_id[sq_pi & MASK] = 0;
        entry_drain[sq_pi & MASK] = 1;
        pi = sq_pi; /* the marker's block */
#if SCANNING
        sq_pi = pi + 1;
        ring_pi = pi + 1;
#endif
        PUBLISH_CTRL(pi, NOP_ID);  /* encode_nop_wqe: one ctrl segment */
        last_wqe_pi = pi;
        sq_pi = pi + 1;
        tmp = unrung;
        unrung = tmp + 1;
        ring_unrung()
      :: else -> err = QUEUE_FULL
      fi
    :: else -> skip
    fi;
    if
    :: err == OK -> sw_begin = sq_pi; sw_end = sq_pi; software_flush = 1
    :: else -> skip
    fi
  :: else -> skip
  fi;
  if
  :: err == OK ->
    pi = sq_pi;
    tail = sq_tail;
    if
    :: D(pi, tail) >= DEPTH -> tail = sq_tail
    :: else -> skip
    fi;
    if
    :: D(pi, tail) >= DEPTH -> err = QUEUE_FULL
    :: else ->
      entry_id[pi & MASK] = id;
      entry_drain[pi & MASK] = 0;
      pi = pi + 1;
      sq_pi = pi;
      sw_end = pi; /* release: the entry is written first */
      add_software_qp()
    fi
  :: else -> skip
  fi
}

/* QpCore::post_gated (qp_post.cc): with the post lock held, or on the owner thread. */
inline post_gated(id, err) {
  st = state;
  if
  :: st == RTS -> post_ready(id, err)
  :: st == RTR -> post_withheld(id, err) /* early_post is in_place or shadow */
  :: st == ERR -> post_flushed(id, err)
  fi
}

/* QpCore::release_withheld_locked (qp_control.cc): the flush, post lock held, device in RTS. */
inline release_withheld_locked() {
#ifdef BROKEN_FLUSH_ORDER
  state = RTS;
#endif
  if
  :: unrung != 0 ->
    begin = hw_pi;
#if SCANNING
    ring_pi = sq_pi; /* the device is in RTS: each copied WQE may run at once */
#endif
#if SHADOW
    b = begin; /* wqe::copy_between_rings(shadow, sq, begin, ...) */
    do
    /* SCANNING: wqe::copy_wqe_ctrl_last, one WQE at a time, the ctrl segment last. */
    :: b != sq_pi -> PUBLISH_CTRL(b, sh_id[b & MASK]); b++
    :: else -> break
    od;
#endif
    ring_unrung()
  :: else -> skip
  fi;
  withheld = 0;
  ever_rts = 1;
#ifndef BROKEN_FLUSH_ORDER
  state = RTS /* published last, with release ordering */
#endif
}

/* QpCore::enter_error_locked (qp_control.cc). */
inline enter_error_locked() {
  if
  :: !ever_rts && !software_flush ->
    begin = hw_pi;
    sw_begin = begin;
    sw_end = sq_pi;
    software_flush = 1;
    unrung = 0;
    withheld = 0;
    if
    :: sq_pi != begin -> add_software_qp()
    :: else -> skip
    fi
  :: else -> skip
  fi;
  state = ERR
}

/* QpCore::modify to RTS from RTR, and to ERR: the device moves first. */
inline modify_to_rts() {
  atomic { dev_state = RTS; dev_rts_reached = 1 };
  LOCK_POSTS();
  release_withheld_locked();
  UNLOCK_POSTS()
}
inline modify_to_err() {
  dev_state = ERR;
  LOCK_POSTS();
  enter_error_locked();
  UNLOCK_POSTS()
}

/* The event: RTS (RTU, COMM_EST, explicit modify), ERR (REJ, timeout, DREQ, modify), or
 * RTS and later ERR (a connection that fails after being established). */
inline one_event() {
  if
  :: modify_to_rts()
  :: modify_to_err()
  :: modify_to_rts(); modify_to_err()
  fi
}

inline record(id, err) {
  if
  :: err == BAD_STATE -> bad_state_seen = 1
  :: else -> skip
  fi;
  assert(err != BAD_STATE); /* invariant 5: from RTR on a post is never a state error */
  if
  :: err == OK -> accepted[id] = 1
  :: else -> skip
  fi
}

#if THREADING != T_SINGLE
proctype Poster(byte p) {
  byte i, id, err, st, pi, tail, tmp;
  do
  :: i < NPOST ->
    id = p * NPOST + i + 1;
#if THREADING == T_THREAD_SAFE
    /* QpCore::post_send: lock, read the state under it; post_send_slow unlocks. */
    spin_lock(post_lock);
    st = state;
    if
    :: st == RTS -> post_ready(id, err)
    :: else -> post_gated(id, err)
    fi;
    spin_unlock(post_lock);
#else
    /* single_poster: acquire load; below RTS, lock and read again (post_send_slow). */
    st = state;
    if
    :: st == RTS -> post_ready(id, err)
    :: else -> spin_lock(post_lock); post_gated(id, err); spin_unlock(post_lock)
    fi;
#endif
    record(id, err);
    atomic { i++; id = 0; err = 0; st = 0; pi = 0; tail = 0; tmp = 0 } /* dead locals */
  :: else -> break
  od;
  posters_done++
}

proctype Events() {
  byte begin, b, tmp;
  one_event();
  events_done = 1
}
#else
/* Threading::single: the one thread posts and delivers the event, in any order. */
proctype Owner() {
  byte i, id, err, st, pi, tail, tmp, begin, b;
  do
  :: i < NPOST ->
    id = i + 1;
    st = state;
    if
    :: st == RTS -> post_ready(id, err)
    :: else -> post_gated(id, err)
    fi;
    record(id, err);
    atomic { i++; id = 0; err = 0; st = 0; pi = 0; tail = 0; tmp = 0 } /* dead locals */
  :: !events_done -> one_event(); events_done = 1
  :: i >= NPOST && events_done -> break
  od;
  posters_done++
}
#endif

#if SCANNING
#define VALID_AHEAD (sq_id[dev_ci & MASK] != 0 && sq_idx[dev_ci & MASK] == dev_ci)
#else
#define VALID_AHEAD false
#endif
#define ANNOUNCED (D(dbr, dev_ci) != 0 && D(dbr, dev_ci) <= DEPTH)

proctype Device() {
  byte slot, id;
end_device:
  do
  :: atomic {
      dev_state == RTS && (ANNOUNCED || VALID_AHEAD) ->
      slot = dev_ci & MASK;
      /* The driver announced only WQEs it had written at this index. */
      assert(sq_id[slot] != 0 && sq_idx[slot] == dev_ci);
      id = sq_id[slot];
      if
      :: id != NOP_ID ->
        executed[id]++;
        executed_total++;
        assert(executed[id] == 1); /* invariant 3: at most once */
        assert(dev_rts_reached);   /* invariant 2 */
        if
        :: was_withheld[id] && ran_posted_after_rts -> order_broken = 1
        :: else -> skip
        fi;
        assert(!order_broken); /* invariant 4 */
        if
        :: !was_withheld[id] -> ran_posted_after_rts = 1
        :: else -> skip
        fi
      :: else -> skip
      fi;
      /* Unsignaled: no CQE; a later signaled one would retire it without reporting it. */
      if
      :: sq_sig[slot] -> cq!dev_ci, 0
      :: else -> skip
      fi;
      dev_ci++
    }
  :: atomic {
      /* In ERR the device flushes what it was told about (and, scanning, what looks valid). */
      dev_state == ERR && (ANNOUNCED || VALID_AHEAD) ->
      cq!dev_ci, 1;
      dev_ci++
    }
  od
}

proctype Poller() {
  byte ctr, tail, pos, id, begin, end;
  bit flushed, drain;
end_poller:
  do
  :: atomic {
      /* QpCore::retire_send, one step: everything it reads is stable while it runs (entries
       * below ring_pi are not rewritten before sq_tail passes them, and only this thread
       * moves sq_tail); a CQE naming no WQE the device was given is stale (dropped). */
      cq?ctr, flushed;
      tail = sq_tail;
      pos = ctr;
      if
      :: D(pos, tail) >= D(ring_pi, tail) -> skip
      :: else ->
        /* The entry is copied out before the release of sq_tail: a poster may reuse the
         * slot as soon as it sees the new tail. */
        id = entry_id[pos & MASK];
        drain = entry_drain[pos & MASK];
        sq_tail = pos + 1;
        if
        :: !drain ->
          completed[id]++;
          assert(completed[id] == 1); /* invariant 3 */
          assert(flushed || executed[id] == 1)
        :: else -> skip
        fi
      fi;
      id = 0; tail = 0; pos = 0; ctr = 0; drain = 0; flushed = 0
    }
  :: atomic {
      /* A poll that could only find the gate closed changes nothing: blocking instead of
       * spinning is the same for safety, and lets the end of the run be detected. */
      sw_pending && (sq_tail == sw_end || D(sq_tail, sw_begin) <= D(sw_end, sw_begin)) ->
      spin_lock(sw_lock)
    };
    /* CqCore::poll_software -> QpCore::poll_software. One step: sw_begin is fixed once
     * software completions start, and the entries below sw_end are written before it. */
    atomic {
      if
      :: sw_listed ->
        tail = sq_tail;
        begin = sw_begin;
        end = sw_end;
        if
        :: D(tail, begin) > D(end, begin) -> skip /* the device still owns earlier WQEs */
        :: else ->
          do
          :: tail != end ->
            id = entry_id[tail & MASK];
            completed[id]++;
            assert(completed[id] == 1); /* invariant 3 */
            assert(executed[id] == 0);
            tail++
          :: else -> break
          od;
          sq_tail = tail
        fi
      :: else -> skip
      fi;
      id = 0; tail = 0; begin = 0; end = 0
    };
    /* Drained (sw_end read again, after the QP's poll): leave the list. */
    atomic {
      if
      :: sw_listed && sq_tail == sw_end -> sw_listed = 0
      :: else -> skip
      fi;
      sw_pending = sw_listed;
      spin_unlock(sw_lock)
    }
  od
}

/* When nothing can move any more: every accepted WR completed exactly once, nothing else
 * ran or completed, and nobody is stuck. */
proctype Checker() {
  byte id = 1;
  timeout ->
  assert(posters_done == NPOSTERS && events_done);
  do
  :: id < MAXID - 1 ->
    if
    :: accepted[id] -> assert(completed[id] == 1)
    :: else -> assert(completed[id] == 0 && executed[id] == 0)
    fi;
    id++
  :: else -> break
  od;
  assert(withheld == 0)
}

init {
  byte p = 0;
  atomic {
#if THREADING == T_SINGLE
    run Owner();
#else
    do
    :: p < NPOSTERS -> run Poster(p); p++
    :: else -> break
    od;
    run Events();
#endif
    run Device();
    run Poller();
    run Checker()
  }
}
