// SPDX-License-Identifier: BSD-3-Clause
// The device's tables of objects (CQs, QPs, SRQs, CQs with events): vectors whose elements
// know their own index, so that removing one is O(1), the last element taking its place, and
// destroying n objects costs O(n) whatever the order. The order of a table stays a function
// of the calls made, so deterministic runs repeat.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace rnicdv::sim {

template <class T>
T* slot_raw(T* p) {
  return p;
}
template <class T>
T* slot_raw(const std::unique_ptr<T>& p) {
  return p.get();
}

// Appends `p`, recording its index in `(*p).*slot`.
template <class P, class T>
void slot_push(std::vector<P>& v, P p, size_t T::*slot) {
  slot_raw(p)->*slot = v.size();
  v.push_back(std::move(p));
}

// Removes `obj`, if it is in `v` at its recorded index.
template <class P, class T>
void slot_erase(std::vector<P>& v, T* obj, size_t T::*slot) {
  const size_t i = obj->*slot;
  if (i >= v.size() || slot_raw(v[i]) != obj) return;
  if (i + 1 != v.size()) {
    std::swap(v[i], v.back());
    slot_raw(v[i])->*slot = i;
  }
  v.pop_back();
}

}  // namespace rnicdv::sim
