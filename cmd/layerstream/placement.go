package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/shards"
)

func init() {
	register(command{
		name:    "placement",
		summary: "print how a model's units would be placed across several devices (first and last layers together)",
		usage:   "--model DIR --devices NAME=SIZE,NAME=SIZE...",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			model := fs.String("model", "", "checkpoint folder, GGUF file or shard folder (required)")
			devices := fs.String("devices", "", "devices and the memory the plan may use on each, e.g. cuda:0=24GiB,cuda:1=24GiB,cpu=64GiB (required)")
			var o engine.Options
			addDTypeFlags(fs, &o)
			fs.Var(&o.Device, "device", "the device generate would compute on (cpu, cuda or xla-cpu), for which --dtype auto chooses as generate does (bf16 for a bf16 checkpoint on cuda with --compute-capability 8.0 or newer, else f32); default: cuda or xla-cpu when the first of --devices is one, else cpu. Matrices are held in that dtype on every device but cpu, whose host kernels read block-quantized and bf16 matrices in place")
			fs.BoolVar(&o.GraphDecode, "graph-decode", false, "size cpu devices as generate --graph-decode holds the weights there (block-quantized and bf16 matrices converted to the dtype, as on cuda and xla-cpu)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if *model == "" || *devices == "" {
					return usageErrorf("--model and --devices are required")
				}
				if o.Device == "" {
					o.Device = engine.DeviceCPU
					first, _, _ := strings.Cut(*devices, "=")
					if kind, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(first)), ":"); engine.Device(kind) == engine.DeviceCUDA || engine.Device(kind) == engine.DeviceXLACPU {
						o.Device = engine.Device(kind)
					}
				}
				return printPlacement(os.Stdout, *model, *devices, o)
			}
		},
	})
}

// printPlacement plans model's units over the devices of spec (guard.Plan) and prints the plan. o says how
// generate would run: the compute dtype (o.DType on o.Device, engine.ChooseDType) and whether cpu devices compute
// with the graphs (o.GraphDecode, guard.InPlaceDevice).
func printPlacement(w io.Writer, model, spec string, o engine.Options) error {
	devs, err := parseDevices(spec, o.GraphDecode)
	if err != nil {
		return usageErrorf("--devices: %v", err)
	}
	units, err := unitSizes(model, o)
	if err != nil {
		return err
	}
	p, err := guard.Plan(units, devs)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, p.String())
	return err
}

// unitSizes reads the units of a checkpoint folder, GGUF file or shard folder, each tensor sized as the engine holds
// it (guard.UnitSize.Add) with matrices in the dtype generate would compute in (engine.ChooseDType of o).
func unitSizes(model string, o engine.Options) ([]guard.UnitSize, error) {
	if shards.IsSet(model) {
		set, err := shards.Open(model)
		if err != nil {
			return nil, err
		}
		dt, err := computeDType(o, set.Config)
		if err != nil {
			return nil, err
		}
		var out []guard.UnitSize
		for _, u := range set.Units() {
			size := guard.UnitSize{Name: u.Name}
			for _, t := range u.Tensors {
				size.Add(t.DType, t.Shape, t.Length, dt)
			}
			out = append(out, size)
		}
		return out, nil
	}
	ck, err := engine.OpenCheckpoint(model)
	if err != nil {
		return nil, err
	}
	dt, err := computeDType(o, ck.Config)
	if err != nil {
		return nil, err
	}
	return guard.UnitSizes(ck, dt)
}

// computeDType is the dtype generate would compute cfg's model in, given o (engine.ChooseDType), logged as the
// engine logs it.
func computeDType(o engine.Options, cfg *checkpoint.Config) (checkpoint.DType, error) {
	choice, err := engine.ChooseDType(o, cfg.TorchDType)
	if err != nil {
		return "", err
	}
	slog.Debug("compute dtype", "dtype", choice.DType, "reason", choice.Reason)
	return choice.DType, nil
}

// parseDevices reads "name=size,name=size": sizes as bytesize.Parse reads them (24GiB, 512MB); a cpu device holds
// block-quantized matrices in place unless graphDecode (guard.InPlaceDevice).
func parseDevices(spec string, graphDecode bool) ([]guard.Device, error) {
	var out []guard.Device
	for _, part := range strings.Split(spec, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=SIZE, e.g. cuda:0=24GiB", part)
		}
		n, err := bytesize.Parse(size)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", name, err)
		}
		out = append(out, guard.Device{Name: name, MemoryBytes: n, InPlace: guard.InPlaceDevice(name, graphDecode)})
	}
	return out, nil
}
