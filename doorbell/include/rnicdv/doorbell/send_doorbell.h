// SPDX-License-Identifier: BSD-3-Clause
// The mlx5 send doorbell: doorbell record, then one register write per batch.
//
// The mode is chosen once, at QP setup (as UCX's {BF, DB, DB_LOCK, AUTO} and DPDK's
// per-queue burst functions do), never per WQE:
//   bf       BlueFlame: a single WQE that fits is copied whole into the register, so the
//            device need not fetch it; otherwise an 8-byte doorbell. Only on a register this
//            QP owns.
//   db       an 8-byte doorbell (the last WQE's ctrl bytes 0..7) and no lock.
//   db_lock  as db, under the lock shared by every QP on the register.
// Hot path in send_doorbell_inl.h.
#pragma once

#include <linux/types.h>

#include <cstdint>

#include "rnicdv/doorbell/device_wake.h"
#include "rnicdv/doorbell/register_lock.h"
#include "rnicdv/status.h"
#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv::doorbell {

enum class DoorbellMode : uint8_t { automatic, db, bf, db_lock };

// "auto", "db", "bf", "db_lock".
const char* doorbell_mode_name(DoorbellMode m) noexcept;

class SendDoorbell {
 public:
  // Resolves `automatic` once, at QP setup: bf when bf_size != 0 and the register is not
  // shared; db_lock when it is shared; db otherwise. Errc::invalid_argument (and nothing
  // changes) for: a null or not 8-byte-aligned register; bf on a shared register, with
  // bf_size == 0, with bf_size not a multiple of 64, or with a register not 64-byte aligned;
  // a value outside DoorbellMode. `bf_reg`/`bf_size` are mlx5dv_qp::bf.reg / bf.size (the size
  // of one of the two alternating halves).
  Errc init(void* bf_reg, uint32_t bf_size, bool shared, DoorbellMode requested) noexcept;

  // The mlx5 send doorbell for a batch of `nreq` WQEs whose last one is `last_wqe` (its ctrl
  // segment, inside `ring`) of `last_ds` 16-byte units; `pi` is the producer index after the
  // batch. rdma-core post_send_db (providers/mlx5/qp.c):
  //   to_device_barrier; dbrec[MLX5_SND_DBR] = pi & 0xffff; wc_start;
  //   BlueFlame copy of the last WQE iff mode()==bf && nreq==1 && last_ds*16 <= bf_size
  //   (align(last_ds*16, 64) bytes, the source wrapping at the ring's end), else one 8-byte
  //   write of the last WQE's ctrl bytes 0..7; wc_flush; then toggle the BlueFlame half
  //   (offset ^= bf_size). db_lock holds the register's lock around the write and the flush.
  // nreq == 0 does nothing. init() must have succeeded.
  void ring(__be32* dbrec, uint32_t pi, const uint8_t* last_wqe, uint32_t last_ds, uint32_t nreq,
            wqe::SqRing ring) noexcept;

  // The same for a batch of at least one WQE whose last one's ctrl head (its first 8 bytes,
  // what the 8-byte doorbell carries) the caller has in hand; `staged` WQEs precede it in the
  // batch (BlueFlame may copy it only when there are none; read only in bf mode), and it is
  // cleared once the doorbell is rung: the caller's count of WQEs awaiting a doorbell.
  void ring_with_head(__be32* dbrec, uint32_t pi, uint64_t last_head, const uint8_t* last_wqe,
                      uint32_t last_ds, uint32_t& staged, wqe::SqRing ring) noexcept;

  // A device that sleeps between doorbells is woken after the register write (device_wake.h).
  // Its QPs leave the plain db path, so that on hardware a QP in db mode pays nothing for the
  // wake-up: the test of the doorbell mode the post makes anyway is the only one (bf and
  // db_lock test the sleep word's pointer).
  void set_wake(const std::atomic<uint32_t>* asleep, int kick_fd) noexcept {
    wake_.init(asleep, kick_fd);
    plain_db_ = mode_ == DoorbellMode::db && !wake_.needed();
  }

  DoorbellMode mode() const noexcept { return mode_; }
  uint32_t bf_offset() const noexcept { return offset_; }  // current half (tests)

 private:
  uint8_t* reg_ = nullptr;
  RegisterLock* lock_ = nullptr;  // db_lock only
  DeviceWake wake_;
  uint32_t bf_size_ = 0;
  uint32_t offset_ = 0;
  DoorbellMode mode_ = DoorbellMode::db;
  bool plain_db_ = true;  // mode_ == db and no device to wake: ring_with_head's common path
};

}  // namespace rnicdv::doorbell

#include "rnicdv/doorbell/send_doorbell_inl.h"
