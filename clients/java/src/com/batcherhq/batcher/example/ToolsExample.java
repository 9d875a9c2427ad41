package com.batcherhq.batcher.example;

import com.batcherhq.batcher.v1.BatcherServiceGrpc;
import com.batcherhq.batcher.v1.ChatInput;
import com.batcherhq.batcher.v1.ChatMessage;
import com.batcherhq.batcher.v1.Completion;
import com.batcherhq.batcher.v1.FinishReason;
import com.batcherhq.batcher.v1.Request;
import com.batcherhq.batcher.v1.ResponseFormat;
import com.batcherhq.batcher.v1.ResponseFormatType;
import com.batcherhq.batcher.v1.SubmitRequest;
import com.batcherhq.batcher.v1.Tool;
import com.batcherhq.batcher.v1.ToolCall;
import com.batcherhq.batcher.v1.ToolChoice;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Struct;
import com.google.protobuf.Value;
import com.google.protobuf.util.JsonFormat;
import io.grpc.ManagedChannel;
import io.grpc.netty.NettyChannelBuilder;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * A tool-call round trip and a strict JSON Schema answer: the user asks, the
 * model answers with a call of the caller's function and JSON arguments, the
 * caller runs the function and sends the assistant's turn and a tool message
 * answering the call's id, and the model answers in text. Usage:
 * ToolsExample HOST:PORT, against a batcherd whose sim-chat route is the
 * embedded sim (it calls the function that tool_choice names, with arguments
 * that follow the function's schema). It exits 0 when every answer is what
 * the contract says, and 1 otherwise.
 *
 * <p>JSON (the schemas, a call's arguments, the tool's result) goes through
 * google.protobuf.Struct with protobuf-java-util's JsonFormat (Debian's
 * libprotobuf-java ships it; it needs libgoogle-gson-java).
 */
public final class ToolsExample {
  private ToolsExample() {}

  static final String WEATHER_SCHEMA =
      "{\"type\":\"object\","
          + "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}},"
          + "\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}";

  static final String CITY_SCHEMA =
      "{\"type\":\"object\","
          + "\"properties\":{\"name\":{\"type\":\"string\"},\"population\":{\"type\":\"integer\",\"minimum\":0}},"
          + "\"required\":[\"name\",\"population\"],\"additionalProperties\":false}";

  public static void main(String[] args) throws Exception {
    String target = args.length > 0 ? args[0] : "127.0.0.1:50051";
    ManagedChannel channel = NettyChannelBuilder.forTarget(target)
            .usePlaintext()
            // 1 MiB windows, fixed: no BDP pings on streams of small deltas (docs/clients.md).
            .flowControlWindow(1 << 20)
            .build();
    boolean ok;
    try {
      BatcherServiceGrpc.BatcherServiceBlockingStub stub = BatcherServiceGrpc.newBlockingStub(channel);
      ok = roundTrip(stub) && jsonSchema(stub);
    } finally {
      channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
    System.out.println(ok ? "tools example: ok" : "tools example: FAILED");
    System.exit(ok ? 0 : 1);
  }

  /** The caller's own function: the weather in a city, as a JSON object. */
  static Struct getWeather(Struct arguments) {
    String city = arguments.getFieldsOrThrow("city").getStringValue();
    String unit = arguments.getFieldsOrThrow("unit").getStringValue();
    return Struct.newBuilder()
        .putFields("city", Value.newBuilder().setStringValue(city).build())
        .putFields("temperature", Value.newBuilder().setNumberValue(unit.equals("celsius") ? 21 : 70).build())
        .putFields("unit", Value.newBuilder().setStringValue(unit).build())
        .build();
  }

  static boolean roundTrip(BatcherServiceGrpc.BatcherServiceBlockingStub stub) throws InvalidProtocolBufferException {
    Tool weather =
        Tool.newBuilder()
            .setName("get_weather")
            .setDescription("The weather in a city now.")
            .setParameters(struct(WEATHER_SCHEMA))
            .setStrict(true)
            .build();
    ChatMessage question = ChatMessage.newBuilder().setRole("user").setContent("What is the weather in Paris?").build();

    // 1. The model answers with a call of get_weather.
    Completion first =
        submit(stub, Request.newBuilder()
            .setModel("sim-chat")
            .setChat(ChatInput.newBuilder().addMessages(question))
            .addTools(weather)
            .setToolChoice(ToolChoice.newBuilder().setFunction("get_weather")));
    if (first.getFinishReason() != FinishReason.FINISH_REASON_TOOL_CALLS
        || first.getMessage().getToolCallsCount() != 1) {
      System.out.println("round trip: no tool call: " + first);
      return false;
    }
    ToolCall call = first.getMessage().getToolCalls(0);
    Struct arguments = struct(call.getArguments()); // fails unless the arguments are a JSON object
    System.out.printf("call: %s(%s) id %s%n", call.getName(), call.getArguments(), call.getId());
    if (!call.getName().equals("get_weather")
        || call.getId().isEmpty()
        || !arguments.getFieldsMap().keySet().equals(Set.of("city", "unit"))
        || !Set.of("celsius", "fahrenheit").contains(arguments.getFieldsOrThrow("unit").getStringValue())) {
      System.out.println("round trip: the call does not follow get_weather's schema");
      return false;
    }

    // 2. The caller runs it, and sends the assistant's turn and the result.
    String result = JsonFormat.printer().omittingInsignificantWhitespace().print(getWeather(arguments));
    Completion last =
        submit(stub, Request.newBuilder()
            .setModel("sim-chat")
            .setChat(ChatInput.newBuilder()
                .addMessages(question)
                .addMessages(ChatMessage.newBuilder().setRole("assistant").addToolCalls(call))
                .addMessages(ChatMessage.newBuilder().setRole("tool").setToolCallId(call.getId()).setContent(result)))
            .addTools(weather));
    System.out.println("answer: " + last.getText());
    // The sim's answer starts from the last message it read: the tool's.
    return last.getFinishReason() == FinishReason.FINISH_REASON_STOP
        && last.getMessage().getToolCallsCount() == 0
        && last.getText().startsWith(result.split(",")[0]);
  }

  static boolean jsonSchema(BatcherServiceGrpc.BatcherServiceBlockingStub stub) throws InvalidProtocolBufferException {
    Completion c =
        submit(stub, Request.newBuilder()
            .setModel("sim-chat")
            .setChat(ChatInput.newBuilder().addMessages(ChatMessage.newBuilder().setRole("user").setContent("Describe Paris.")))
            .setResponseFormat(ResponseFormat.newBuilder()
                .setType(ResponseFormatType.RESPONSE_FORMAT_TYPE_JSON_SCHEMA)
                .setName("city")
                .setSchema(struct(CITY_SCHEMA))
                .setStrict(true)));
    System.out.println("json: " + c.getText());
    Struct city = struct(c.getText());
    Value population = city.getFieldsOrDefault("population", Value.getDefaultInstance());
    return city.getFieldsMap().keySet().equals(Set.of("name", "population"))
        && city.getFieldsOrThrow("name").hasStringValue()
        && population.hasNumberValue()
        && population.getNumberValue() >= 0
        && population.getNumberValue() == Math.rint(population.getNumberValue());
  }

  static Completion submit(BatcherServiceGrpc.BatcherServiceBlockingStub stub, Request.Builder req) {
    return stub.withDeadlineAfter(30, TimeUnit.SECONDS)
        .submit(SubmitRequest.newBuilder().setRequest(req).build())
        .getCompletion();
  }

  /** A JSON object's text as a Struct. */
  static Struct struct(String json) throws InvalidProtocolBufferException {
    Struct.Builder b = Struct.newBuilder();
    JsonFormat.parser().merge(json, b);
    return b.build();
  }
}
