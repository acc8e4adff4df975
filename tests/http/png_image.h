// A minimal PNG reader for tests (zlib inflates; no image library): 8-bit RGB or RGBA,
// non-interlaced — what headless Chromium's --screenshot writes. Enough to count pixels in a
// region of a screenshot; anything else is an error naming what it met.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::testing {

struct PngImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // [height][width][3]
  const std::uint8_t* at(int x, int y) const { return &rgb[(static_cast<std::size_t>(y) * width + x) * 3]; }
};

inline absl::StatusOr<PngImage> read_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < 8 || file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    return absl::InvalidArgumentError(path + " is not a PNG file (" + std::to_string(file.size()) + " bytes)");
  }
  auto be32 = [&](std::size_t at) {
    return static_cast<std::uint32_t>(static_cast<std::uint8_t>(file[at])) << 24 |
           static_cast<std::uint32_t>(static_cast<std::uint8_t>(file[at + 1])) << 16 |
           static_cast<std::uint32_t>(static_cast<std::uint8_t>(file[at + 2])) << 8 |
           static_cast<std::uint32_t>(static_cast<std::uint8_t>(file[at + 3]));
  };
  PngImage img;
  int channels = 0;
  std::string idat;
  for (std::size_t pos = 8; pos + 8 <= file.size();) {
    const std::uint32_t len = be32(pos);
    const std::string type = file.substr(pos + 4, 4);
    if (pos + 12 + len > file.size()) return absl::InvalidArgumentError(path + ": truncated chunk " + type);
    const std::size_t data = pos + 8;
    if (type == "IHDR") {
      img.width = static_cast<int>(be32(data));
      img.height = static_cast<int>(be32(data + 4));
      const int depth = file[data + 8], color = file[data + 9], interlace = file[data + 12];
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        return absl::UnimplementedError(path + ": PNG depth " + std::to_string(depth) + " colour type " +
                                        std::to_string(color) + " interlace " + std::to_string(interlace) +
                                        " (only 8-bit RGB/RGBA, not interlaced)");
      }
      channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.append(file, data, len);
    }
    pos = data + len + 4;  // + CRC
  }
  if (channels == 0) return absl::InvalidArgumentError(path + ": no IHDR chunk");
  const std::size_t stride = static_cast<std::size_t>(img.width) * channels;
  std::vector<std::uint8_t> raw((stride + 1) * static_cast<std::size_t>(img.height));
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size()) {
    return absl::InvalidArgumentError(path + ": cannot inflate the image data");
  }
  // Undo the per-row filters (PNG spec, section 9).
  std::vector<std::uint8_t> prev(stride, 0), row(stride);
  img.rgb.resize(static_cast<std::size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    const std::uint8_t* line = &raw[static_cast<std::size_t>(y) * (stride + 1)];
    const int filter = line[0];
    for (std::size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<std::size_t>(channels) ? row[i - channels] : 0;
      const int b = prev[i];
      const int c = i >= static_cast<std::size_t>(channels) ? prev[i - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default: return absl::InvalidArgumentError(path + ": bad filter " + std::to_string(filter) + " in row " + std::to_string(y));
      }
      row[i] = static_cast<std::uint8_t>(line[1 + i] + predictor);
    }
    for (int x = 0; x < img.width; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        img.rgb[(static_cast<std::size_t>(y) * img.width + x) * 3 + ch] = row[static_cast<std::size_t>(x) * channels + ch];
      }
    }
    std::swap(prev, row);
  }
  return img;
}

}  // namespace baton::testing
