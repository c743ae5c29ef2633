//! Which device holds each layer, as llama.cpp places them (`llama_model::load_tensors`):
//! the input layer (the embeddings) always on the CPU; of the `n_layer` repeating layers
//! and the output layer, the last `n_gpu_layers` on the devices, split in proportion to
//! `tensor_split` or, by default, to each device's free memory; the rest on the CPU.
//! The devices are the RPC workers' first, then this machine's GPUs (Vulkan's), in
//! llama.cpp's order.

use crate::ggml::rpc::RpcWorker;
use crate::ggml::Device;
use crate::{Error, Result};

/// How the offloaded layers are shared among the devices (llama.cpp's `split_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Whole layers to each device, in proportion (`LLAMA_SPLIT_MODE_LAYER`, the default).
    #[default]
    Layer,
    /// Every offloaded layer on one device, the `main` one of the devices in order
    /// (`LLAMA_SPLIT_MODE_NONE` with `main_gpu`).
    None { main: u32 },
}

/// The devices a model's layers are spread over, and where each layer went.
pub struct Placement {
    /// Every worker's devices, in the order given, then this machine's.
    pub devices: Vec<Device>,
    /// Per repeating layer, the index of its device in `devices`; `None`: the CPU.
    pub layers: Vec<Option<usize>>,
    /// The output layer's device (its norm and head); `None`: the CPU.
    pub output: Option<usize>,
    /// The RPC workers the devices belong to, held for the model's life.
    pub workers: Vec<RpcWorker>,
    /// Per device, the index of its worker in `workers` (`None`: one of this machine's).
    owners: Vec<Option<usize>>,
}

impl Placement {
    /// Everything on the CPU: no device.
    pub fn cpu(n_layer: usize) -> Placement {
        Placement {
            devices: Vec::new(),
            layers: vec![None; n_layer],
            output: None,
            workers: Vec::new(),
            owners: Vec::new(),
        }
    }

    /// Whether device `d` is this machine's (a GPU), not an RPC worker's.
    pub fn is_local(&self, d: usize) -> bool {
        self.owners[d].is_none()
    }

    /// A backend on device `d`, owned by the caller: through its worker's connection for an
    /// RPC worker's device, or a new one for a device of this machine.
    pub fn backend(&self, d: usize) -> Result<std::ptr::NonNull<ggml_sys::ggml_backend>> {
        match self.owners[d] {
            Some(w) => self.workers[w].backend(&self.devices[d]),
            None => self.devices[d].init_backend(),
        }
    }

    /// llama.cpp's split: `n_gpu_layers` of the `n_layer + 1` layers (the output one
    /// counts; `None` is all of them), the last ones, over the devices by `tensor_split`
    /// (empty or all zero: by free memory), or all on one device (`Split::None`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a `main` device beyond the workers' devices.
    pub fn new(
        workers: Vec<RpcWorker>,
        local: Vec<Device>,
        n_layer: usize,
        n_gpu_layers: Option<u32>,
        tensor_split: &[f32],
        split: Split,
    ) -> Result<Placement> {
        let (mut owners, mut devices): (Vec<Option<usize>>, Vec<Device>) = workers
            .iter()
            .enumerate()
            .flat_map(|(w, worker)| worker.devices.iter().map(move |d| (Some(w), d.clone())))
            .chain(local.into_iter().map(|d| (None, d)))
            .unzip();
        if devices.is_empty() {
            return Ok(Placement {
                workers,
                ..Placement::cpu(n_layer)
            });
        }
        if let Split::None { main } = split {
            let device = devices.get(main as usize).cloned().ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "main_gpu is {main}, and there are {} devices (0 to {})",
                    devices.len(),
                    devices.len() - 1
                ))
            })?;
            devices = vec![device];
            owners = vec![owners[main as usize]];
        }
        let weights: Vec<f32> = if tensor_split.iter().all(|&x| x == 0.0) {
            devices.iter().map(|d| d.memory().0 as f32).collect()
        } else {
            (0..devices.len())
                .map(|i| tensor_split.get(i).copied().unwrap_or(0.0))
                .collect()
        };
        let splits = cumulative_fractions(&weights);
        let all = n_layer as i64 + 1;
        let n_gpu = n_gpu_layers.map_or(all, i64::from);
        let gpu_start = (all - n_gpu).max(0);
        let active = n_gpu.min(all);
        let device_of = |il: i64| -> Option<usize> {
            if il < gpu_start || il - gpu_start >= active {
                return None;
            }
            // std::upper_bound over the split points, in f32 as llama.cpp computes it.
            let at = (il - gpu_start) as f32 / active as f32;
            Some(splits.partition_point(|&s| s <= at).min(devices.len() - 1))
        };
        Ok(Placement {
            layers: (0..n_layer as i64).map(device_of).collect(),
            output: device_of(n_layer as i64),
            devices,
            workers,
            owners,
        })
    }

    /// How many layers (the output one included) are on a device.
    pub fn offloaded(&self) -> usize {
        self.layers.iter().chain([&self.output]).filter(|d| d.is_some()).count()
    }
}

/// The running sums of `weights`, each divided by their total, in f32.
fn cumulative_fractions(weights: &[f32]) -> Vec<f32> {
    let mut sum = 0.0f32;
    let mut points: Vec<f32> = weights
        .iter()
        .map(|&w| {
            sum += w;
            sum
        })
        .collect();
    for p in &mut points {
        *p /= sum;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_points_follow_llama_cpp() {
        let splits = cumulative_fractions(&[1.0, 1.0]);
        assert_eq!(splits, vec![0.5, 1.0]);
        // 24 layers and the output over two equal devices: 0..=12 on the first.
        let at = |il: i64| splits.partition_point(|&s| s <= il as f32 / 25.0);
        assert_eq!((0..25).filter(|&il| at(il) == 0).count(), 13);
    }
}
