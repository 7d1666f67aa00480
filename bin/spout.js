#!/usr/bin/env node
import '../dist/tools/spout.js';
