// Gate files of the fault-suite samples (gated, fork_exec): the sample
// touches DIR/ready (and DIR/done.N) and waits for DIR/go.N, so a script
// can attach, kill or detach a tool at an exact point of the run.
#pragma once

#include "common.h"

#include <string>
#include <unistd.h>

// DIR "-": no gates (every wait passes at once, '*' rounds run one step):
// the untraced reference run.
static bool no_gates;

static bool exists(const std::string &p) { return no_gates || access(p.c_str(), F_OK) == 0; }

static void touch(const std::string &p)
{
	if (no_gates)
		return;
	FILE *f = fopen(p.c_str(), "w");
	if (!f) {
		perror(p.c_str());
		result(false, "reason=cannot_create file=%s", p.c_str());
	}
	fclose(f);
}

static void wait_for(const std::string &p)
{
	for (long i = 0; i < 150000; i++) { // 300 s
		if (exists(p))
			return;
		usleep(2000);
	}
	result(false, "reason=gate_timeout file=%s", p.c_str());
}
