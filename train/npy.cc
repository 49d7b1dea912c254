#include "train/npy.h"

#include <algorithm>

namespace sluice {
namespace {

std::string NpyHeader(const char* descr, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  }
  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';  // data starts 64-byte aligned
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  return out + header;
}

}  // namespace

Status WriteNpy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                const void* data, size_t bytes) {
  std::string out = NpyHeader(descr, shape);
  out.append(static_cast<const char*>(data), bytes);
  return WriteFileAtomic(path, out);
}

Result<NpyRowWriter> NpyRowWriter::Create(const std::string& path, const char* descr, uint64_t rows, uint64_t cols,
                                          uint32_t elem_bytes) {
  NpyRowWriter w;
  SLUICE_ASSIGN_OR_RETURN(w.file_, File::Open(path, OpenMode::kCreate, /*want_direct=*/false));
  const std::string header = NpyHeader(descr, {static_cast<int64_t>(rows), static_cast<int64_t>(cols)});
  w.data_at_ = header.size();
  w.rows_ = rows;
  w.row_bytes_ = cols * elem_bytes;
  SLUICE_RETURN_IF_ERROR(w.file_.Allocate(w.data_at_ + rows * w.row_bytes_));
  SLUICE_RETURN_IF_ERROR(PwriteFull(w.file_, reinterpret_cast<const std::byte*>(header.data()), header.size(), 0));
  return w;
}

Status NpyRowWriter::Write(uint64_t row, const void* data) {
  if (row >= rows_) return InvalidArgument("write " + file_.path() + ": row " + std::to_string(row) + " of " + std::to_string(rows_));
  const uint64_t pending_rows = pending_.size() / std::max<uint64_t>(row_bytes_, 1);
  if (row != pending_first_ + pending_rows || pending_.size() + row_bytes_ > (1u << 20)) {
    SLUICE_RETURN_IF_ERROR(Flush());
    pending_first_ = row;
  }
  const auto* p = static_cast<const std::byte*>(data);
  pending_.insert(pending_.end(), p, p + row_bytes_);
  return Status::Ok();
}

Status NpyRowWriter::Flush() {
  if (pending_.empty()) return Status::Ok();
  SLUICE_RETURN_IF_ERROR(PwriteFull(file_, pending_.data(), pending_.size(), data_at_ + pending_first_ * row_bytes_));
  pending_.clear();
  return Status::Ok();
}

Status NpyRowWriter::Read(uint64_t row, void* data) {
  SLUICE_RETURN_IF_ERROR(Flush());
  return PreadFull(file_, static_cast<std::byte*>(data), row_bytes_, data_at_ + row * row_bytes_);
}

Status NpyRowWriter::Close() {
  SLUICE_RETURN_IF_ERROR(Flush());
  return file_.Sync();
}

}  // namespace sluice
