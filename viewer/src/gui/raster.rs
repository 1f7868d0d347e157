//! A small CPU rasteriser for egui's tessellated output, so the viewer can render a PNG
//! without a display or a GPU (`fragprobe view --screenshot`).
//!
//! It does what egui's glow painter does, in software: triangles with per-vertex colour
//! (premultiplied sRGBA, interpolated in gamma space) multiplied by a texture sample
//! (the font atlas or a user texture), blended "premultiplied over". Coverage uses pixel
//! centres with a top-left fill rule so two triangles that share an edge never blend a
//! pixel twice (egui draws its anti-aliasing as translucent feathering triangles, so
//! double-blended seams would show).

use std::collections::HashMap;

use egui::epaint::{ClippedPrimitive, Primitive, Vertex};
use egui::{Color32, TextureFilter, TextureId, TexturesDelta};

/// An RGBA8 image, rows top to bottom, not premultiplied (what PNG wants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 4` bytes.
    pub rgba: Vec<u8>,
}

impl Image {
    /// The pixel at (x, y) as `[r, g, b, a]`.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 4] {
        let i = ((y * self.width + x) * 4) as usize;
        [
            self.rgba[i],
            self.rgba[i + 1],
            self.rgba[i + 2],
            self.rgba[i + 3],
        ]
    }

    /// Number of distinct colours (a cheap "is it blank?" check).
    pub fn distinct_colours(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        for p in self.rgba.chunks_exact(4) {
            seen.insert([p[0], p[1], p[2], p[3]]);
        }
        seen.len()
    }

    /// Writes the image as a PNG file.
    pub fn write_png(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), self.width, self.height);
        enc.set_color(png::ColorType::Rgba);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc
            .write_header()
            .with_context(|| format!("cannot write PNG header to {}", path.display()))?;
        w.write_image_data(&self.rgba)
            .with_context(|| format!("cannot write PNG data to {}", path.display()))?;
        w.finish()
            .with_context(|| format!("cannot finish {}", path.display()))?;
        Ok(())
    }
}

struct Texture {
    size: [usize; 2],
    pixels: Vec<Color32>,
    linear: bool,
}

impl Texture {
    fn texel(&self, x: isize, y: isize) -> [f32; 4] {
        let x = x.clamp(0, self.size[0] as isize - 1) as usize;
        let y = y.clamp(0, self.size[1] as isize - 1) as usize;
        let c = self.pixels[y * self.size[0] + x];
        [c.r() as f32, c.g() as f32, c.b() as f32, c.a() as f32].map(|v| v / 255.0)
    }

    fn sample(&self, u: f32, v: f32) -> [f32; 4] {
        let fx = u * self.size[0] as f32;
        let fy = v * self.size[1] as f32;
        if !self.linear {
            return self.texel(fx.floor() as isize, fy.floor() as isize);
        }
        let (fx, fy) = (fx - 0.5, fy - 0.5);
        let (x0, y0) = (fx.floor(), fy.floor());
        let (tx, ty) = (fx - x0, fy - y0);
        let (x0, y0) = (x0 as isize, y0 as isize);
        let a = self.texel(x0, y0);
        let b = self.texel(x0 + 1, y0);
        let c = self.texel(x0, y0 + 1);
        let d = self.texel(x0 + 1, y0 + 1);
        let mut out = [0.0; 4];
        for i in 0..4 {
            let top = a[i] + (b[i] - a[i]) * tx;
            let bot = c[i] + (d[i] - c[i]) * tx;
            out[i] = top + (bot - top) * ty;
        }
        out
    }
}

/// The textures egui asked for, kept across frames.
#[derive(Default)]
pub struct Textures {
    map: HashMap<TextureId, Texture>,
}

impl Textures {
    /// Applies one frame's new textures and patches (before painting that frame).
    /// The `set` part is drained; pass the rest to [`Textures::free`] after painting.
    pub fn apply(&mut self, delta: &mut TexturesDelta) {
        for (id, deltas) in delta.set.drain() {
            for d in &deltas {
                self.apply_one(id, d);
            }
        }
    }

    /// Frees the textures a frame let go of (after painting that frame).
    pub fn free(&mut self, mut delta: TexturesDelta) {
        for id in delta.free.drain() {
            self.map.remove(&id);
        }
        delta.clear();
    }

    fn apply_one(&mut self, id: TextureId, d: &egui::epaint::ImageDelta) {
        let egui::ImageData::Color(img) = &d.image;
        let linear = d.options.magnification == TextureFilter::Linear;
        match d.pos {
            None => {
                self.map.insert(
                    id,
                    Texture {
                        size: img.size,
                        pixels: img.pixels.clone(),
                        linear,
                    },
                );
            }
            Some([px, py]) => {
                let Some(t) = self.map.get_mut(&id) else {
                    return;
                };
                for y in 0..img.size[1] {
                    for x in 0..img.size[0] {
                        let (tx, ty) = (px + x, py + y);
                        if tx < t.size[0] && ty < t.size[1] {
                            t.pixels[ty * t.size[0] + tx] = img.pixels[y * img.size[0] + x];
                        }
                    }
                }
            }
        }
    }
}

/// A premultiplied-alpha RGBA float canvas.
pub struct Canvas {
    width: u32,
    height: u32,
    px: Vec<[f32; 4]>,
}

fn edge(a: [f32; 2], b: [f32; 2], p: [f32; 2]) -> f32 {
    (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])
}

/// Whether pixels exactly on edge a→b belong to this triangle (top-left rule for
/// triangles whose `edge(p0, p1, p2)` is positive, y pointing down).
fn owns_edge(a: [f32; 2], b: [f32; 2]) -> bool {
    let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
    dy > 0.0 || (dy == 0.0 && dx < 0.0)
}

impl Canvas {
    /// A canvas filled with one opaque colour.
    pub fn new(width: u32, height: u32, background: Color32) -> Canvas {
        let bg = [background.r(), background.g(), background.b(), 255].map(|v| v as f32 / 255.0);
        Canvas {
            width,
            height,
            px: vec![bg; (width * height) as usize],
        }
    }

    /// Draws tessellated primitives. `pixels_per_point` scales egui's points to pixels.
    pub fn draw(&mut self, prims: &[ClippedPrimitive], textures: &Textures, pixels_per_point: f32) {
        for p in prims {
            let Primitive::Mesh(mesh) = &p.primitive else {
                continue;
            };
            let clip = [
                (p.clip_rect.min.x * pixels_per_point).round().max(0.0) as i64,
                (p.clip_rect.min.y * pixels_per_point).round().max(0.0) as i64,
                ((p.clip_rect.max.x * pixels_per_point).round() as i64).min(self.width as i64),
                ((p.clip_rect.max.y * pixels_per_point).round() as i64).min(self.height as i64),
            ];
            if clip[0] >= clip[2] || clip[1] >= clip[3] {
                continue;
            }
            let tex = textures.map.get(&mesh.texture_id);
            for tri in mesh.indices.chunks_exact(3) {
                let v = [
                    &mesh.vertices[tri[0] as usize],
                    &mesh.vertices[tri[1] as usize],
                    &mesh.vertices[tri[2] as usize],
                ];
                self.triangle(v, clip, tex, pixels_per_point);
            }
        }
    }

    fn triangle(&mut self, v: [&Vertex; 3], clip: [i64; 4], tex: Option<&Texture>, ppp: f32) {
        let mut v = v;
        let mut p = v.map(|v| [v.pos.x * ppp, v.pos.y * ppp]);
        let mut area = edge(p[0], p[1], p[2]);
        if area.abs() < 1e-12 || !area.is_finite() {
            return;
        }
        if area < 0.0 {
            v.swap(1, 2);
            p.swap(1, 2);
            area = -area;
        }
        let min_x = p.iter().map(|q| q[0]).fold(f32::INFINITY, f32::min);
        let max_x = p.iter().map(|q| q[0]).fold(f32::NEG_INFINITY, f32::max);
        let min_y = p.iter().map(|q| q[1]).fold(f32::INFINITY, f32::min);
        let max_y = p.iter().map(|q| q[1]).fold(f32::NEG_INFINITY, f32::max);
        let x0 = (min_x.floor() as i64).max(clip[0]);
        let x1 = (max_x.ceil() as i64).min(clip[2]);
        let y0 = (min_y.floor() as i64).max(clip[1]);
        let y1 = (max_y.ceil() as i64).min(clip[3]);
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        let own = [
            owns_edge(p[1], p[2]),
            owns_edge(p[2], p[0]),
            owns_edge(p[0], p[1]),
        ];
        let col = v.map(|v| {
            let c = v.color;
            [c.r(), c.g(), c.b(), c.a()].map(|x| x as f32 / 255.0)
        });
        let uv = v.map(|v| [v.uv.x, v.uv.y]);
        let flat = col[0] == col[1] && col[1] == col[2];
        for y in y0..y1 {
            let py = y as f32 + 0.5;
            for x in x0..x1 {
                let q = [x as f32 + 0.5, py];
                let w = [
                    edge(p[1], p[2], q),
                    edge(p[2], p[0], q),
                    edge(p[0], p[1], q),
                ];
                if (0..3).any(|i| w[i] < 0.0 || (w[i] == 0.0 && !own[i])) {
                    continue;
                }
                let b = w.map(|w| w / area);
                let mut src = if flat {
                    col[0]
                } else {
                    let mut s = [0.0; 4];
                    for (i, s) in s.iter_mut().enumerate() {
                        *s = b[0] * col[0][i] + b[1] * col[1][i] + b[2] * col[2][i];
                    }
                    s
                };
                if let Some(t) = tex {
                    let u = b[0] * uv[0][0] + b[1] * uv[1][0] + b[2] * uv[2][0];
                    let vv = b[0] * uv[0][1] + b[1] * uv[1][1] + b[2] * uv[2][1];
                    let s = t.sample(u, vv);
                    for i in 0..4 {
                        src[i] *= s[i];
                    }
                }
                let d = &mut self.px[(y as u32 * self.width + x as u32) as usize];
                let keep = 1.0 - src[3];
                for i in 0..4 {
                    d[i] = src[i] + d[i] * keep;
                }
            }
        }
    }

    /// The finished picture (un-premultiplied RGBA8).
    pub fn into_image(self) -> Image {
        let mut rgba = Vec::with_capacity(self.px.len() * 4);
        for p in &self.px {
            let a = p[3].clamp(0.0, 1.0);
            let un = |c: f32| {
                let c = if a > 0.0 { c / a } else { 0.0 };
                (c.clamp(0.0, 1.0) * 255.0).round() as u8
            };
            rgba.extend_from_slice(&[un(p[0]), un(p[1]), un(p[2]), (a * 255.0).round() as u8]);
        }
        Image {
            width: self.width,
            height: self.height,
            rgba,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui::epaint::{Mesh, Vertex};
    use egui::{pos2, Rect};

    fn quad(rect: Rect, color: Color32) -> ClippedPrimitive {
        let mut m = Mesh::default();
        m.add_colored_rect(rect, color);
        ClippedPrimitive {
            clip_rect: Rect::EVERYTHING,
            primitive: Primitive::Mesh(m),
        }
    }

    #[test]
    fn shared_edges_are_blended_once() {
        // Half-transparent quad = two triangles sharing a diagonal: every pixel inside must
        // get exactly the same colour, or the seam was blended twice (or skipped).
        let mut c = Canvas::new(16, 16, Color32::BLACK);
        let white_half = Color32::from_rgba_premultiplied(128, 128, 128, 128);
        c.draw(
            &[quad(
                Rect::from_min_max(pos2(2.0, 2.0), pos2(14.0, 14.0)),
                white_half,
            )],
            &Textures::default(),
            1.0,
        );
        let img = c.into_image();
        let inside = img.pixel(5, 5);
        assert_ne!(inside, [0, 0, 0, 255]);
        for y in 2..14 {
            for x in 2..14 {
                assert_eq!(img.pixel(x, y), inside, "pixel {x},{y}");
            }
        }
        assert_eq!(img.pixel(1, 1), [0, 0, 0, 255]);
        assert_eq!(img.pixel(14, 14), [0, 0, 0, 255]);
    }

    #[test]
    fn adjacent_quads_tile_without_gaps_or_overlap() {
        let mut c = Canvas::new(8, 4, Color32::BLACK);
        let half = Color32::from_rgba_premultiplied(100, 0, 0, 128);
        c.draw(
            &[
                quad(Rect::from_min_max(pos2(0.0, 0.0), pos2(3.0, 4.0)), half),
                quad(Rect::from_min_max(pos2(3.0, 0.0), pos2(8.0, 4.0)), half),
            ],
            &Textures::default(),
            1.0,
        );
        let img = c.into_image();
        let first = img.pixel(0, 0);
        for x in 0..8 {
            assert_eq!(img.pixel(x, 2), first, "column {x}");
        }
    }

    #[test]
    fn texture_multiplies_vertex_colour_and_clip_applies() {
        let mut t = Textures::default();
        let id = TextureId::Managed(7);
        let img = egui::ColorImage::new([1, 1], vec![Color32::from_rgb(255, 0, 0)]);
        let mut delta = TexturesDelta::default();
        delta.push(
            id,
            egui::epaint::ImageDelta::full(img, egui::TextureOptions::NEAREST),
        );
        t.apply(&mut delta);
        t.free(delta);
        let mut m = Mesh::with_texture(id);
        m.add_rect_with_uv(
            Rect::from_min_max(pos2(0.0, 0.0), pos2(4.0, 4.0)),
            Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)),
            Color32::WHITE,
        );
        let prim = ClippedPrimitive {
            clip_rect: Rect::from_min_max(pos2(0.0, 0.0), pos2(2.0, 4.0)),
            primitive: Primitive::Mesh(m),
        };
        let mut c = Canvas::new(4, 4, Color32::BLACK);
        c.draw(&[prim], &t, 1.0);
        let img = c.into_image();
        assert_eq!(img.pixel(0, 0), [255, 0, 0, 255]);
        assert_eq!(img.pixel(3, 0), [0, 0, 0, 255], "clipped away");
        let _ = Vertex::default();
    }
}
