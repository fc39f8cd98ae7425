package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
			dtype := fs.String("dtype", "f32", "dtype weight matrices are held in on the devices: f32, bf16 or f16; block-quantized matrices (a GGUF file's) are dequantized to it on every device but cpu, whose host kernels read their blocks in place")
			graphDecode := fs.Bool("graph-decode", false, "size cpu devices as generate --graph-decode holds the weights there (block-quantized matrices dequantized, as on cuda and xla-cpu)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if *model == "" || *devices == "" {
					return usageErrorf("--model and --devices are required")
				}
				return printPlacement(os.Stdout, *model, *devices, *dtype, *graphDecode)
			}
		},
	})
}

// printPlacement plans model's units over the devices of spec (guard.Plan) and prints the plan; graphDecode says
// cpu devices compute with the graphs (guard.InPlaceDevice).
func printPlacement(w io.Writer, model, spec, dtype string, graphDecode bool) error {
	devs, err := parseDevices(spec, graphDecode)
	if err != nil {
		return usageErrorf("--devices: %v", err)
	}
	units, err := unitSizes(model, dtype)
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
// it (guard.UnitSize.Add) with matrices at dtype.
func unitSizes(model, dtype string) ([]guard.UnitSize, error) {
	dt, err := checkpoint.ParseDType(strings.ToUpper(strings.Replace(dtype, "f", "F", 1)))
	if err != nil {
		return nil, usageErrorf("--dtype: %v", err)
	}
	if shards.IsSet(model) {
		set, err := shards.Open(model)
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
	return guard.UnitSizes(ck, dt)
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
