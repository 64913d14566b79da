// Frame 0 of every call and reply (wire.h, "Envelopes"): building RequestHeader and
// ResponseHeader, parsing them, reading them in place (Note [Headers read in place]), and a
// method's body.
#include "distributed/wire.h"

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/common.h>

#include "distributed/wire_parse.h"

namespace tessera::internal::wire {

// ---- Envelopes ----

RequestHeader make_request_header(uint64_t request_id, std::string method, const google::protobuf::Message& body,
                                  int64_t deadline_ms) {
  RequestHeader h;
  h.set_version(kWireVersion);
  h.set_request_id(request_id);
  h.set_method(std::move(method));
  h.set_deadline_ms(deadline_ms);
  body.SerializeToString(h.mutable_body());
  return h;
}

ResponseHeader make_response_header(uint64_t request_id, const tessera::Status& status,
                                    const google::protobuf::Message* body) {
  ResponseHeader h;
  h.set_version(kWireVersion);
  h.set_request_id(request_id);
  if (!status.ok()) {
    *h.mutable_status() = from_status(status);
  } else if (body != nullptr) {
    body->SerializeToString(h.mutable_body());
  }
  return h;
}

StatusOr<RequestHeader> parse_request_header(const void* data, std::size_t size) {
  RequestHeader h;
  TESSERA_RETURN_IF_ERROR(parse_message(data, size, &h, "request header"));
  TESSERA_RETURN_IF_ERROR(check_version(h.version(), "request header"));
  if (h.method().empty()) return errors::invalid_argument("request header {} names no method", h.request_id());
  return h;
}

StatusOr<ResponseHeader> parse_response_header(const void* data, std::size_t size) {
  ResponseHeader h;
  TESSERA_RETURN_IF_ERROR(parse_message(data, size, &h, "response header"));
  TESSERA_RETURN_IF_ERROR(check_version(h.version(), "response header"));
  return h;
}

namespace {

// Note [Headers read in place]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every call's frame 0 is a RequestHeader and every reply's a ResponseHeader; parsing them into
// messages costs allocations and copies (the method, the body) on both sides of every call.
// read_request_header and read_response_header read the fields in place instead, accepting what
// the generated parser (protobuf 3.21, MergeFromImpl over a flat array) accepts and no more:
// * tags of at most 5 bytes (the 5th below 0x80; bits past 32 dropped), never 0, never field 0,
//   never an end-group tag outside a group; the bytes end exactly after a field;
// * varints of at most 10 bytes (the 10th below 0x80; bits past 64 dropped, past 32 for uint32);
// * lengths of at most 5 bytes (the 5th below 8), at most INT32_MAX - 16, within the bytes;
// * a known field with another wire type is an unknown field; unknown fields are skipped (groups
//   nested 100 deep at most, each closed by its own end tag; wire types 6 and 7 refused);
// * the last occurrence of a field wins; every occurrence of a string field must be valid UTF-8.
// A ResponseHeader with a status (an error reply, or an OK one that says so) goes through the full
// parse for the status, the sub-message whose repeated occurrences merge. Tests compare both
// readers with the parser on every truncation, mutation and random input they make.
constexpr int kMaxGroupDepth = 100;  // ParseContext's default recursion limit

class FieldReader {
 public:
  FieldReader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}
  bool at_end() const { return p_ == end_; }

  bool tag(uint32_t* out) {
    uint64_t v;
    if (!varint(&v, 5)) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  }
  bool varint(uint64_t* out, int max_bytes = 10) {
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      v += static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (b < 0x80) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  bool length_delimited(std::string_view* out) {
    // A length of 5 bytes at most; 2 GiB or more (a 5th byte of 8 or above) is over the bound too.
    uint64_t n;
    if (!varint(&n, 5)) return false;
    if (n > static_cast<uint64_t>(INT32_MAX - 16) || n > static_cast<std::size_t>(end_ - p_)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  bool skip(std::size_t n) {
    if (n > static_cast<std::size_t>(end_ - p_)) return false;
    p_ += n;
    return true;
  }
  // Skips the value of an unknown field with tag `tag` (a group up to its end tag).
  bool skip_field(uint32_t tag, int depth = 0) {
    uint64_t v;
    std::string_view s;
    switch (tag & 7) {
      case 0: return varint(&v);
      case 1: return skip(8);
      case 2: return length_delimited(&s);
      case 5: return skip(4);
      case 3: {
        if (depth >= kMaxGroupDepth) return false;
        for (;;) {
          uint32_t inner;
          if (!tag_of_field(&inner)) return false;
          if ((inner & 7) == 4) return inner == (tag & ~7u) + 4;  // its own end tag, and no other
          if (!skip_field(inner, depth + 1)) return false;
        }
      }
      default: return false;  // 4 (an end tag with no group), 6, 7
    }
  }
  // The next tag, refusing 0 and field number 0.
  bool tag_of_field(uint32_t* out) { return tag(out) && *out != 0 && (*out >> 3) != 0; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

bool valid_utf8(std::string_view s) {
  return google::protobuf::internal::IsStructurallyValidUTF8(s.data(), static_cast<int>(s.size()));
}

struct HeaderFields {
  uint64_t version = 0, request_id = 0, deadline_ms = 0;
  std::string_view method, body;
  bool has_status = false;
};

// The fields of a RequestHeader (`request`) or ResponseHeader read in place; false where the
// generated parser refuses the bytes (Note [Headers read in place]).
bool read_header_fields(const void* data, std::size_t size, bool request, HeaderFields* f) {
  if (size > static_cast<std::size_t>(INT_MAX) || (data == nullptr && size != 0)) return false;
  const auto* p = static_cast<const uint8_t*>(data);
  FieldReader in(p, p + size);
  const uint32_t body_field = request ? 5 : 4;
  while (!in.at_end()) {
    uint32_t tag;
    if (!in.tag_of_field(&tag)) return false;
    const uint32_t field = tag >> 3, type = tag & 7;
    bool ok;
    if (field == 1 && type == 0) {
      ok = in.varint(&f->version);
    } else if (field == 2 && type == 0) {
      ok = in.varint(&f->request_id);
    } else if (field == body_field && type == 2) {
      ok = in.length_delimited(&f->body);
    } else if (request && field == 3 && type == 2) {
      ok = in.length_delimited(&f->method) && valid_utf8(f->method);
    } else if (request && field == 4 && type == 0) {
      ok = in.varint(&f->deadline_ms);
    } else if (!request && field == 3 && type == 2) {
      std::string_view status;
      ok = in.length_delimited(&status);  // parsed by the full parse (read_response_header)
      f->has_status = true;
    } else {
      ok = in.skip_field(tag);
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> peek_request_method(const void* data, std::size_t size) {
  HeaderFields f;
  if (!read_header_fields(data, size, true, &f)) return std::nullopt;
  return f.method;
}

StatusOr<RequestHeaderView> read_request_header(const void* data, std::size_t size) {
  HeaderFields f;
  if (!read_header_fields(data, size, true, &f)) {
    // The parser's own words for what is wrong.
    StatusOr<RequestHeader> parsed = parse_request_header(data, size);
    if (!parsed.ok()) return parsed.status();
    return errors::internal("request header of {} bytes: parsed, but not read in place", size);
  }
  TESSERA_RETURN_IF_ERROR(check_version(static_cast<uint32_t>(f.version), "request header"));
  if (f.method.empty()) return errors::invalid_argument("request header {} names no method", f.request_id);
  RequestHeaderView h;
  h.version_ = static_cast<uint32_t>(f.version);
  h.request_id_ = f.request_id;
  h.method_ = f.method;
  h.deadline_ms_ = static_cast<int64_t>(f.deadline_ms);
  h.body_ = f.body;
  return h;
}

StatusOr<ResponseHeaderView> read_response_header(const void* data, std::size_t size) {
  HeaderFields f;
  const bool read = read_header_fields(data, size, false, &f);
  ResponseHeaderView h;
  if (!read || f.has_status) {
    StatusOr<ResponseHeader> parsed = parse_response_header(data, size);
    if (!parsed.ok()) return parsed.status();
    if (!read) return errors::internal("response header of {} bytes: parsed, but not read in place", size);
    h.status_ = to_status(parsed.value().status());
  }
  TESSERA_RETURN_IF_ERROR(check_version(static_cast<uint32_t>(f.version), "response header"));
  h.version_ = static_cast<uint32_t>(f.version);
  h.request_id_ = f.request_id;
  h.body_ = f.body;
  return h;
}

Status parse_body(std::string_view bytes, google::protobuf::Message* out) {
  const std::string type = out->GetTypeName();
  TESSERA_RETURN_IF_ERROR(parse_message(bytes.data(), bytes.size(), out, type));
  const google::protobuf::FieldDescriptor* field = out->GetDescriptor()->FindFieldByNumber(1);
  if (field == nullptr || field->name() != "version" ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT32 || field->is_repeated()) {
    return errors::internal("{} is not a top-level wire message (field 1 is not uint32 version)", type);
  }
  return check_version(out->GetReflection()->GetUInt32(*out, field), type);
}

}  // namespace tessera::internal::wire
