//go:build !linux

package bench

func processCPU(pid int) (float64, bool) { return 0, false }

func selfCPU() float64 { return 0 }

func machineCPU() (float64, bool) { return 0, false }
