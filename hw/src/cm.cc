// SPDX-License-Identifier: BSD-3-Clause
// Names for the connection manager's vocabulary (rnicdv/hw/cm.h), shared by every backend.
#include "rnicdv/hw/cm.h"

#include <cstdio>

namespace rnicdv::hw {

std::string cm_address_string(const CmAddress& a) {
  const std::string ip = a.ip.to_string();
  return (a.ip.is_v4() ? ip : "[" + ip + "]") + ":" + std::to_string(a.port);
}

// IBA 12.6.7.2 Table 108 (Linux ib_cm.h enum ib_cm_rej_reason).
const char* reject_reason_name(uint16_t reason) noexcept {
  switch (reason) {
    case 1:
      return "no QP available";
    case 2:
      return "no EEC available";
    case 3:
      return "no resources";
    case 4:
      return "timeout";
    case 5:
      return "unsupported request";
    case 6:
      return "invalid communication ID";
    case 7:
      return "invalid communication instance";
    case 8:
      return "invalid service ID (nothing listens on that port)";
    case 9:
      return "invalid transport type";
    case 10:
      return "stale connection";
    case 11:
      return "RDC does not exist";
    case 12:
      return "invalid primary GID";
    case 13:
      return "invalid primary LID";
    case 14:
      return "invalid primary SL";
    case 15:
      return "invalid primary traffic class";
    case 16:
      return "invalid primary hop limit";
    case 17:
      return "invalid primary packet rate";
    case 18:
      return "invalid alternate GID";
    case 19:
      return "invalid alternate LID";
    case 20:
      return "invalid alternate SL";
    case 21:
      return "invalid alternate traffic class";
    case 22:
      return "invalid alternate hop limit";
    case 23:
      return "invalid alternate packet rate";
    case 24:
      return "port CM redirect";
    case 25:
      return "port redirect";
    case 26:
      return "invalid MTU";
    case 27:
      return "insufficient responder resources";
    case 28:
      return "consumer defined";
    case 29:
      return "invalid RNR retry";
    case 30:
      return "duplicate local communication ID";
    case 31:
      return "invalid class version";
    case 32:
      return "invalid flow label";
    case 33:
      return "invalid alternate flow label";
    case 35:
      return "vendor option not supported";
  }
  return "unknown reason";
}

// IBA 12.11.2 Table 120 (Linux ib_cm.h enum ib_cm_sidr_status).
const char* sidr_status_name(uint8_t status) noexcept {
  switch (status) {
    case sidr_status::success:
      return "success";
    case sidr_status::unsupported:
      return "service ID not supported (nothing listens on that port)";
    case sidr_status::reject:
      return "rejected by the service";
    case sidr_status::no_qp:
      return "no QP available";
    case sidr_status::redirect:
      return "redirect";
    case sidr_status::unsupported_version:
      return "unsupported version";
  }
  return "unknown status";
}

const char* cm_event_type_name(CmEventType t) noexcept {
  switch (t) {
    case CmEventType::connect_request:
      return "CONNECT_REQUEST";
    case CmEventType::connect_response:
      return "CONNECT_RESPONSE";
    case CmEventType::established:
      return "ESTABLISHED";
    case CmEventType::rejected:
      return "REJECTED";
    case CmEventType::unreachable:
      return "UNREACHABLE";
    case CmEventType::timeout:
      return "TIMEOUT";
    case CmEventType::disconnected:
      return "DISCONNECTED";
    case CmEventType::error:
      return "CONNECT_ERROR";
  }
  return "?";
}

}  // namespace rnicdv::hw
